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

// streamed writes stream to a fresh redactor of secrets in chunks of the
// given sizes (the last repeated) and returns what came out after Flush.
func streamed(t testing.TB, secrets map[string][]byte, stream string, first int, chunk int) string {
	t.Helper()
	var buf bytes.Buffer
	w := NewRedactor(&buf, secrets)
	r, ok := w.(*Redactor)
	if !ok {
		w.Write([]byte(stream))
		return buf.String()
	}
	first = min(first, len(stream))
	r.Write([]byte(stream[:first]))
	for rest := stream[first:]; len(rest) > 0; {
		n := min(chunk, len(rest))
		r.Write([]byte(rest[:n]))
		rest = rest[n:]
	}
	r.Flush()
	return buf.String()
}

// allSplits checks that stream redacts to want however it is split.
func allSplits(t *testing.T, secrets map[string][]byte, stream, want string) {
	t.Helper()
	if got := NewMatcher(secrets).RedactString(stream); got != want {
		t.Fatalf("RedactString(%q) = %q, want %q", stream, got, want)
	}
	for first := 0; first <= len(stream); first++ {
		for _, chunk := range []int{1, 2, 3, 5, 7, 64} {
			if got := streamed(t, secrets, stream, first, chunk); got != want {
				t.Fatalf("%q split at %d, chunks of %d: got %q, want %q", stream, first, chunk, got, want)
			}
		}
	}
}

func TestForms(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"tok-1234", []string{"tok-1234"}},
		{"tok-1234\n", []string{"tok-1234\n", "tok-1234\r\n", "tok-1234"}},
		{" Tok 1234\n", []string{" Tok 1234\n", " Tok 1234\r\n", "Tok 1234"}},
		{"line-one\nline-two\n", []string{"line-one\nline-two\n", "line-one\r\nline-two\r\n",
			"line-one\nline-two", "line-one\r\nline-two", "line-one line-two"}},
		{"Ünïcode-Tök", []string{"Ünïcode-Tök", "ünïcode-tök"}},
		{"\n\n", []string{"\n\n", "\r\n\r\n"}},
	} {
		var got []string
		for _, f := range Forms([]byte(tc.value)) {
			got = append(got, string(f))
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("Forms(%q) = %q, want %q", tc.value, got, tc.want)
		}
	}
}

// TestRedactorForms: each way a secret file's value usually reaches an
// output is redacted, split anywhere: the trimmed value ($(cat f),
// .strip()), the pty's "\r\n" (cat under -t), the value's fields joined
// by spaces (echo $(cat f)), and case variants (the proxy lower-cases
// host names).
func TestRedactorForms(t *testing.T) {
	one := map[string][]byte{"T": []byte("Hunter2-Tok\n")}
	two := map[string][]byte{"K": []byte("line-one\nline-two\n")}
	for _, tc := range []struct {
		secrets      map[string][]byte
		stream, want string
	}{
		{one, "v=Hunter2-Tok;\n", "v=[REDACTED:T];\n"},                // $(cat f), .strip()
		{one, "Hunter2-Tok\n", "[REDACTED:T]"},                        // cat f
		{one, "Hunter2-Tok\r\n", "[REDACTED:T]"},                      // cat f under a pty
		{one, "[Hunter2-Tok]", "[[REDACTED:T]]"},                      // echo "[$(cat f)]"
		{one, "hunter2-tok.example", "[REDACTED:T].example"},          // the proxy's lower case
		{one, "HUNTER2-TOK HuNtEr2-tOk", "[REDACTED:T] [REDACTED:T]"}, // any ASCII case
		{one, "Hunter2-To", "Hunter2-To"},
		{two, "a line-one\nline-two\nb", "a [REDACTED:K]b"},
		{two, "a line-one\r\nline-two\r\nb", "a [REDACTED:K]b"}, // cat f under a pty
		{two, "a line-one\r\nline-two$ ", "a [REDACTED:K]$ "},   // $(cat f) under a pty
		{two, "a line-one line-two b", "a [REDACTED:K] b"},      // echo $(cat f)
		{two, "line-one\nline-three", "line-one\nline-three"},
	} {
		allSplits(t, tc.secrets, tc.stream, tc.want)
	}
}

// TestRedactorUnicodeLower: a secret with non-ASCII letters is redacted
// in the form strings.ToLower gives it, which is how the proxy writes a
// host name.
func TestRedactorUnicodeLower(t *testing.T) {
	s := map[string][]byte{"U": []byte("Ünïcode-Tök")}
	allSplits(t, s, "host "+strings.ToLower("Ünïcode-Tök")+".example", "host [REDACTED:U].example")
	allSplits(t, s, "ÜNÏCODE-TÖK", "ÜNÏCODE-TÖK") // ASCII folding only: strings.ToUpper is no form
}

// TestRedactorOverlapping: secrets that overlap, contain one another or
// share a prefix: at each position the leftmost match wins and, there,
// the longest; no byte of the longer secret escapes because the shorter
// one matched first, however the stream is split.
func TestRedactorOverlapping(t *testing.T) {
	s := map[string][]byte{
		"LONG":  []byte("abcd-efgh-ijkl"),
		"SHORT": []byte("abcd-efgh"),
		"MID":   []byte("efgh-ijkl-mnop"),
		"TAIL":  []byte("ijkl-mnop"),
	}
	for _, tc := range []struct{ stream, want string }{
		{"abcd-efgh-ijkl", "[REDACTED:LONG]"},
		{"abcd-efgh-ijkX", "[REDACTED:SHORT]-ijkX"},
		{"abcd-efgh-ijkl-mnop", "[REDACTED:LONG]-mnop"},
		{"xefgh-ijkl-mnop", "x[REDACTED:MID]"},
		{"xefgh-ijkl-mnoX", "xefgh-ijkl-mnoX"},
		{"abcd-efgh-ijkl-mnop-ijkl-mnop", "[REDACTED:LONG]-mnop-[REDACTED:TAIL]"},
	} {
		allSplits(t, s, tc.stream, tc.want)
	}
	// A secret whose form is a prefix of another's: "tok\n" and "tok".
	p := map[string][]byte{"A": []byte("same-tok"), "B": []byte("same-tok-longer\n")}
	allSplits(t, p, "same-tok-longer\n same-tok-longer same-tok same-tok-", "[REDACTED:B] [REDACTED:B] [REDACTED:A] [REDACTED:A]-")
	// The same form in two secrets: the first name keeps it.
	d := map[string][]byte{"B": []byte("dup-value\n"), "A": []byte("dup-value")}
	allSplits(t, d, "dup-value\n", "[REDACTED:B]")
	allSplits(t, d, "dup-value.", "[REDACTED:A].")
}

// TestRedactorHoldsOnlyPrefixes: between writes only a tail that could
// start a secret is held back, so an interactive prompt is not delayed.
func TestRedactorHoldsOnlyPrefixes(t *testing.T) {
	var buf bytes.Buffer
	w := NewRedactor(&buf, map[string][]byte{"T": []byte("Hunter2-Tok\n")})
	w.Write([]byte("root@box:~# "))
	if buf.String() != "root@box:~# " {
		t.Fatalf("a prompt was held back: %q", buf.String())
	}
	w.Write([]byte("echo HUNT"))
	if buf.String() != "root@box:~# echo " {
		t.Fatalf("got %q", buf.String())
	}
	w.Write([]byte("ER2-tok!"))
	if buf.String() != "root@box:~# echo [REDACTED:T]!" {
		t.Fatalf("got %q", buf.String())
	}
}

// TestRedactorPeriodic: a periodic secret in a periodic stream (the
// worst case of the anchor search) is still redacted exactly.
func TestRedactorPeriodic(t *testing.T) {
	s := map[string][]byte{"P": []byte(strings.Repeat("ab", 50) + "c")}
	stream := strings.Repeat("ab", 10000) + "c" + strings.Repeat("ab", 10000)
	want := strings.Repeat("ab", 10000-50) + "[REDACTED:P]" + strings.Repeat("ab", 10000)
	if got := NewMatcher(s).RedactString(stream); got != want {
		t.Fatalf("periodic: got %d bytes", len(got))
	}
	if got := streamed(t, s, stream, 0, 4096); got != want {
		t.Fatalf("periodic streamed: got %d bytes", len(got))
	}
}

func TestMatcherNil(t *testing.T) {
	var m *Matcher
	if m.RedactString("x") != "x" || string(m.Redact([]byte("y"))) != "y" || NewMatcher(map[string][]byte{"E": nil}) != nil {
		t.Fatal("a nil matcher must redact nothing")
	}
	m = NewMatcher(map[string][]byte{"T": []byte("tok-1234")})
	in := []byte("a TOK-1234 b")
	if got := string(m.Redact(in)); got != "a [REDACTED:T] b" || string(in) != "a TOK-1234 b" {
		t.Fatalf("Redact: %q (input now %q)", got, in)
	}
}

func TestCheckSecret(t *testing.T) {
	for v, ok := range map[string]bool{"abcd": true, " abcd\n": true, "abc\n": false, "\n\n\n\n\n": false, "": false, "ab cd": true} {
		if err := CheckSecret([]byte(v)); (err == nil) != ok {
			t.Errorf("CheckSecret(%q) = %v", v, err)
		} else if err != nil && strings.Contains(err.Error(), strings.TrimSpace(v)) && strings.TrimSpace(v) != "" {
			t.Errorf("the error shows the value: %v", err)
		}
	}
}

// FuzzRedactor: for any two secrets and any stream split anywhere, the
// streamed output equals the one-shot RedactString, no form of a secret
// (ASCII case-insensitively) survives outside the markers, and a stream
// holding no form passes through unchanged.
func FuzzRedactor(f *testing.F) {
	f.Add([]byte("Hunter2-Tok\n"), []byte("4242"), []byte("x Hunter2-Tok\n y hunter2-tok z 4242"), uint16(5), uint8(3))
	f.Add([]byte("line-one\nline-two\n"), []byte("two\r\nx"), []byte("line-one\r\nline-two\r\nline-one line-two"), uint16(9), uint8(1))
	f.Add([]byte("abcd-efgh"), []byte("efgh-ijkl"), []byte("abcd-efgh-ijkl"), uint16(6), uint8(2))
	f.Add([]byte("aaaa"), []byte("aaab"), []byte("aaaaaaabaaaa"), uint16(3), uint8(1))
	f.Add([]byte(" Ünïcode-Tök "), []byte("REDACTED"), []byte("ünïcode-tök [REDACTED:A] redacted"), uint16(4), uint8(7))
	f.Add([]byte("\n\n\n"), []byte("tok"), []byte("a\n\n\nb tok\r\n"), uint16(0), uint8(1))
	f.Add([]byte("no-match-here"), []byte("neither"), []byte("plain output\nwith lines\r\n"), uint16(2), uint8(4))
	f.Fuzz(func(t *testing.T, a, b, data []byte, first uint16, chunk uint8) {
		if len(a) > 64 || len(b) > 64 || len(data) > 4096 {
			return
		}
		secrets := map[string][]byte{"A": a, "B": b}
		m := NewMatcher(secrets)
		once := m.RedactString(string(data))
		got := streamed(t, secrets, string(data), int(first), int(chunk)+1)
		if got != once {
			t.Fatalf("streamed %q != one-shot %q", got, once)
		}
		var forms [][]byte
		for _, v := range [][]byte{a, b} {
			for _, f := range Forms(v) {
				forms = append(forms, foldCopy(f))
			}
		}
		occurs := false
		for _, f := range forms {
			occurs = occurs || bytes.Contains(foldCopy(data), f)
		}
		if !occurs && got != string(data) {
			t.Fatalf("no secret in %q, but it came out as %q", data, got)
		}
		// Between the markers nothing of a secret is left.
		segs := []string{got}
		for _, mk := range []string{"[REDACTED:A]", "[REDACTED:B]"} {
			var next []string
			for _, s := range segs {
				next = append(next, strings.Split(s, mk)...)
			}
			segs = next
		}
		for _, s := range segs {
			for _, f := range forms {
				if bytes.Contains(foldCopy([]byte(s)), f) {
					t.Fatalf("form %q survives in %q (output %q)", f, s, got)
				}
			}
		}
	})
}
