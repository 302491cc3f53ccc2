package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

// spinLog is a logSource that keeps kept bytes and has not ended: Wait
// answers at once while past is below kept (there is news), and reports
// the end otherwise. A reader that waits again and again without reading
// further is caught after a few calls.
type spinLog struct {
	kept  int64
	waits int
}

var errSpin = errors.New("Wait called again with nothing new read")

func (l *spinLog) Kept() int64 { return l.kept }

func (l *spinLog) Wait(_ context.Context, past int64) (int64, bool, error) {
	l.waits++
	if l.waits > 10 {
		return 0, false, errSpin
	}
	if past < l.kept {
		return l.kept, false, nil
	}
	return l.kept, true, nil
}

// TestBuildLogFollowDry: a follower whose log file holds less than the
// log keeps (no file yet when it looked, or one cut short) waits for the
// log's end instead of asking again at once, without end (it spun on a
// core for the build's whole run before).
func TestBuildLogFollowDry(t *testing.T) {
	short := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(short, []byte("abcd"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		file string // "": no file
		want string
	}{
		{"no file", "", ""},
		{"short file", short, "abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *os.File
			if tc.file != "" {
				var err error
				if f, err = os.Open(tc.file); err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			var got []byte
			ls := &logStream{f: f, emit: func(ev api.Event) error {
				got = append(got, ev.Output()...)
				return nil
			}}
			log := &spinLog{kept: 10}
			if err := ls.send(context.Background(), log, true); err != nil {
				t.Fatalf("send: %v after %d waits", err, log.waits)
			}
			if string(got) != tc.want || log.waits > 2 {
				t.Fatalf("sent %q after %d waits, want %q after at most 2", got, log.waits, tc.want)
			}
		})
	}
}
