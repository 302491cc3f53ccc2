package output

import (
	"bytes"
	"strings"
	"testing"
)

// TestRedactorSplits feeds a stream with secrets at every split point and
// checks that no value ever reaches the writer.
func TestRedactorSplits(t *testing.T) {
	secrets := map[string][]byte{"TOKEN": []byte("s3cr3t-value"), "PIN": []byte("4242")}
	stream := "start s3cr3t-value mid 4242 and s3cr3t-values4242 end s3cr3t"
	want := "start [REDACTED:TOKEN] mid [REDACTED:PIN] and [REDACTED:TOKEN]s[REDACTED:PIN] end s3cr3t"
	for split := 0; split <= len(stream); split++ {
		for chunk := 1; chunk <= 7; chunk++ {
			var buf bytes.Buffer
			r := NewRedactor(&buf, secrets).(*Redactor)
			r.Write([]byte(stream[:split]))
			rest := stream[split:]
			for len(rest) > 0 {
				n := min(chunk, len(rest))
				r.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			r.Flush()
			if buf.String() != want {
				t.Fatalf("split %d chunk %d: got %q", split, chunk, buf.String())
			}
		}
	}
}

func TestRedactorPassThrough(t *testing.T) {
	var buf bytes.Buffer
	if w := NewRedactor(&buf, nil); w != &buf {
		t.Fatal("no secrets should return the writer itself")
	}
	if w := NewRedactor(&buf, map[string][]byte{"E": nil}); w != &buf {
		t.Fatal("empty secrets should be ignored")
	}
	// A marker containing a secret's text is never re-redacted.
	r := NewRedactor(&buf, map[string][]byte{"RED": []byte("RED")}).(*Redactor)
	r.Write([]byte("RED"))
	r.Write([]byte("x"))
	r.Flush()
	if got := buf.String(); got != "[REDACTED:RED]x" || strings.Count(got, "REDACTED") != 1 {
		t.Fatalf("got %q", got)
	}
}
