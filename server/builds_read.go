package server

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/api"
)

// buildLog is build.log: the build's log from an offset, as events of
// type stdout of at most logChunk bytes each, read from its file (up to
// what the log has kept); with follow, the events go on as the command
// writes until the log ends, and the answer is the build at its end.
func (s *Service) buildLog(ctx context.Context, c Caller, in *input) (any, error) {
	if in.emit == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "build.log is a stream")
	}
	req, err := decode[api.BuildLogRequest](in)
	if err != nil {
		return nil, err
	}
	if req.Offset < 0 {
		return nil, api.Errorf(api.CodeInvalidArgument, "offset must not be negative")
	}
	run, b, err := s.findBuild(ctx, c.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	var log logSource
	if run != nil {
		run.mu.Lock()
		if run.log != nil {
			log = run.log
		}
		run.mu.Unlock()
		if log == nil {
			// Ending before its log was made: what it kept.
			final, err := run.wait(ctx)
			if err != nil {
				return nil, err
			}
			b = &final
		}
	}
	// Opened once the log is known: a build's log file exists before its
	// build.Log does (makeBuildDir).
	f, err := openLogFile(logPath(s.builds.path(b.ID)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if f != nil {
		defer f.Close()
	}
	ls := &logStream{f: f, emit: in.emit, off: req.Offset}
	if log == nil {
		// Ended: what it kept.
		return b, ls.upTo(b.Log.Kept)
	}
	if req.Follow && in.open != nil {
		// A follower knows the stream is up before the first event.
		in.open()
	}
	if err := ls.send(ctx, log, req.Follow); err != nil {
		return nil, err
	}
	if !req.Follow {
		v := run.view()
		return &v, nil
	}
	final, err := run.wait(ctx)
	if err != nil {
		return nil, err
	}
	return &final, nil
}

// logSource is a build's log in flight (build.Log).
type logSource interface {
	Kept() int64
	Wait(ctx context.Context, past int64) (int64, bool, error)
}

// logStream sends a log file's bytes as events.
type logStream struct {
	f    *os.File // nil: no file (nothing kept)
	emit func(api.Event) error
	off  int64
	seq  uint64
	// dry is set once the file gave less than the log kept (no file, or
	// one cut short): nothing more can be read from it.
	dry bool
}

// send sends log's kept bytes from the stream's offset: what it keeps
// now, or with follow what it keeps until it ends. A stream gone dry
// waits for the log's end without reading again.
func (ls *logStream) send(ctx context.Context, log logSource, follow bool) error {
	for {
		kept, ended := log.Kept(), false
		if follow {
			past := ls.off
			if ls.dry {
				past = math.MaxInt64 // only the end is news
			}
			var err error
			if kept, ended, err = log.Wait(ctx, past); err != nil {
				return err
			}
		}
		if err := ls.upTo(kept); err != nil {
			return err
		}
		if !follow || ended {
			return nil
		}
	}
}

// upTo sends the file's bytes from the stream's offset up to kept, in
// events of at most logChunk bytes. A file shorter than kept ends it
// early (its write failed) and leaves the stream dry.
func (ls *logStream) upTo(kept int64) error {
	for ls.off < kept {
		if ls.f == nil {
			ls.dry = true
			return nil
		}
		buf := make([]byte, min(kept-ls.off, logChunk))
		n, err := ls.f.ReadAt(buf, ls.off)
		if n > 0 {
			ls.seq++
			ev := api.Event{Seq: ls.seq, Type: api.EventStdout}
			ev.SetOutput(buf[:n])
			if err := ls.emit(ev); err != nil {
				return err
			}
			ls.off += int64(n)
		}
		if errors.Is(err, io.EOF) || n == 0 {
			ls.dry = ls.off < kept
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buildArtifact is build.artifact: the artifact of the build with that
// sha256, read from the build's out directory through descriptors (no
// symlink followed, a regular file checked) and written to in.out.
func (s *Service) buildArtifact(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decode[api.BuildArtifactRef](in)
	if err != nil {
		return nil, err
	}
	if in.out == nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "build.artifact answers the file's bytes: this transport cannot carry them")
	}
	_, b, err := s.findBuild(ctx, c.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	digest := strings.TrimPrefix(strings.ToLower(req.Digest), "sha256:")
	var art *api.BuildArtifact
	for i := range b.Artifacts {
		if b.Artifacts[i].SHA256 == digest {
			art = &b.Artifacts[i]
			break
		}
	}
	if digest == "" || art == nil {
		return nil, api.Errorf(api.CodeNotFound, "build %s has no artifact of sha256 %q", b.ID, req.Digest)
	}
	f, err := openArtifact(outDir(s.builds.path(b.ID)), art.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := io.Copy(in.out, f)
	in.rec.ev.Result = mustJSON(map[string]any{"path": art.Path, "sha256": art.SHA256, "bytes": n})
	if err != nil {
		return nil, err
	}
	return &api.FileContent{Path: art.Path, Size: n}, nil
}
