package schema

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fixture reads testdata/full/NAME.json: a results file of every kind,
// shared with bench/render's and bench/report's tests.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "full", FileName(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every kind decodes from its fixture, encodes back to the same JSON
// document (no field lost or renamed on the way) and decodes to an equal
// value.
func TestRoundTrip(t *testing.T) {
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) {
			data := fixture(t, kind)
			r, err := Decode(data, kind)
			if err != nil {
				t.Fatal(err)
			}
			if h := r.Header(); h.Schema != Version || h.Bench != kind || h.Date == "" || h.Machine.Kernel == "" {
				t.Errorf("envelope %+v", h)
			}
			out, err := Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			var want, got any
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(want, got) {
				wb, _ := json.MarshalIndent(want, "", " ")
				gb, _ := json.MarshalIndent(got, "", " ")
				t.Errorf("the fixture does not survive a round trip; first difference:\n%s", firstDiff(string(wb), string(gb)))
			}
			again, err := Decode(out, kind)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, again) {
				t.Error("decoding what was encoded gives another value")
			}
		})
	}
}

// firstDiff returns the lines around the first line where a and b differ.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if strings.TrimSpace(al[i]) != strings.TrimSpace(bl[i]) {
			return "want: " + al[i] + "\ngot:  " + bl[i]
		}
	}
	return "(lengths differ)"
}

// New makes every kind with its envelope set; an unknown kind is nil.
func TestNew(t *testing.T) {
	for _, kind := range Kinds() {
		r := New(kind)
		if r == nil {
			t.Fatalf("New(%q) = nil", kind)
		}
		if h := r.Header(); h.Schema != Version || h.Bench != kind {
			t.Errorf("New(%q) envelope %+v", kind, h)
		}
	}
	if New("docker") != nil {
		t.Error("New of an unknown kind")
	}
}

func TestDecodeRefuses(t *testing.T) {
	startup := string(fixture(t, "startup"))
	for name, c := range map[string]struct {
		data, want string
		err        error
	}{
		"older schema":     {`{"systems": []}`, "startup", ErrVersion},
		"newer schema":     {`{"schema": 99, "bench": "startup", "systems": []}`, "startup", ErrVersion},
		"another kind":     {startup, "density", ErrKind},
		"an unknown kind":  {`{"schema": 2, "bench": "docker"}`, "", ErrKind},
		"no main field":    {`{"schema": 2, "bench": "startup"}`, "startup", ErrIncomplete},
		"no policy mix":    {`{"schema": 2, "bench": "policy", "requests": []}`, "policy", ErrIncomplete},
		"not JSON":         {`{"schema": 2, "bench": "startup", "systems": [`, "startup", nil},
		"wrong type":       {`{"schema": 2, "bench": "startup", "systems": 3}`, "startup", nil},
		"trailing garbage": {`{"schema": 2, "bench": "startup", "systems": []} x`, "startup", nil},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Decode([]byte(c.data), c.want)
			if err == nil {
				t.Fatalf("decoded %+v", r)
			}
			if c.err != nil && !errors.Is(err, c.err) {
				t.Errorf("error %v, want %v", err, c.err)
			}
		})
	}
	// Any kind is accepted when none is asked for.
	if r, err := Decode([]byte(startup), ""); err != nil || r.Header().Bench != "startup" {
		t.Errorf("Decode(any) = %v, %v", r, err)
	}
}

func TestEncodeNeedsKind(t *testing.T) {
	if _, err := Encode(&Startup{Systems: []StartupSystem{}}); !errors.Is(err, ErrKind) {
		t.Errorf("Encode without a benchmark: %v", err)
	}
	b, err := Encode(&Startup{Run: Run{Bench: "startup"}, Systems: []StartupSystem{}})
	if err != nil || !strings.Contains(string(b), `"schema": 2`) || !strings.HasSuffix(string(b), "}\n") {
		t.Errorf("Encode = %s, %v", b, err)
	}
}

func TestFail(t *testing.T) {
	var r Run
	for range 4 {
		r.Fail(2, "boom")
	}
	if !r.Failed || len(r.Errors) != 2 {
		t.Errorf("Fail kept %d errors, failed %v", len(r.Errors), r.Failed)
	}
}

func TestHelpers(t *testing.T) {
	one := 1.0
	f := &Startup{Systems: []StartupSystem{{Name: "moat", P50: &one, N: 1}, {Name: "runc", SkippedReason: "missing"}}}
	if !f.System("moat").Measured() || f.System("runc").Measured() || f.System("nope").Measured() {
		t.Error("Measured")
	}
	rows := []ControlplaneRow{{Mode: "sequential", Kind: KindAPI}, {Mode: "bursts of 10", Kind: KindAPI}}
	if r := Row(rows, "bursts of 10", KindAPI); r != &rows[1] || Row(rows, "sequential", KindBwrap) != nil {
		t.Error("Row")
	}
}
