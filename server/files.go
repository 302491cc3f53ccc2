package server

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"strconv"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/output"
	"github.com/moat-sandbox/moat/sandbox"
)

// The file operations run inside the sandbox through its agent
// (sandbox.Files): paths are the sandbox's own, resolved beneath its root
// by the kernel; nothing here opens a sandbox path on the host.

// fileOp runs f on the sandbox named by id; its audit record (written by
// the dispatcher) keeps the result summary f returns.
//
// Before f runs, the policy judges the paths the operation names (see
// judgePaths): write says whether it changes them. A refusal is recorded
// like any other failure of the call.
func (s *Service) fileOp(ctx context.Context, c Caller, in *input, kind, id string, write bool, paths []string, f func(ctx context.Context, m *managed, files sandbox.Files) (any, any, error)) (any, error) {
	m, done, err := s.use(c, id)
	if err != nil {
		return nil, err
	}
	defer done()
	var resp, summary any
	err = s.judgePaths(ctx, c, m, &in.verdicts, kind, write, paths...)
	if err == nil {
		resp, summary, err = f(ctx, m, m.box().Files())
	}
	// The operation was tried: allowed, unless refused.
	in.rec.ev.Kind, in.rec.ev.Sandbox, in.rec.ev.Decision = kind, id, audit.DecisionAllow
	if summary != nil {
		in.rec.ev.Result = mustJSON(summary)
	}
	return resp, err
}

// decodeRead decodes a read or download and returns its byte cap.
func (s *Service) decodeRead(in *input) (*api.FilePath, int64, error) {
	req, err := decodeFile(in, filePath)
	if err != nil {
		return nil, 0, err
	}
	max, err := s.capBytes(req.MaxBytes)
	return req, max, err
}

// capBytes lowers the server's cap to what the caller asked for.
func (s *Service) capBytes(asked int64) (int64, error) {
	if asked < 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "max_bytes must not be negative")
	}
	if asked == 0 || asked > s.cfg.MaxFileBytes {
		return s.cfg.MaxFileBytes, nil
	}
	return asked, nil
}

// fileMode parses an octal permission ("0644"); empty gives def.
func fileMode(s string, def fs.FileMode) (fs.FileMode, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, api.Errorf(api.CodeInvalidArgument, "mode %q is not an octal permission", s)
	}
	return fs.FileMode(v), nil
}

// decodeFile decodes a file operation's request and checks that the
// paths it names are set.
func decodeFile[T any](in *input, paths func(*T) []string) (*T, error) {
	req, err := decode[T](in)
	if err != nil {
		return nil, err
	}
	for _, p := range paths(req) {
		if p == "" {
			return nil, api.Errorf(api.CodeInvalidArgument, "path is required")
		}
	}
	return req, nil
}

func filePath(r *api.FilePath) []string   { return []string{r.Path} }
func writePath(r *api.WriteFile) []string { return []string{r.Path} }

func (s *Service) readFile(ctx context.Context, c Caller, in *input) (any, error) {
	req, max, err := s.decodeRead(in)
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.read", req.Sandbox, false, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		data, err := f.ReadFile(ctx, req.Path, max)
		if err != nil {
			return nil, nil, err
		}
		if _, err := in.out.Write(data); err != nil {
			return nil, nil, err
		}
		return &api.FileContent{Path: req.Path, Size: int64(len(data))}, map[string]int{"bytes": len(data)}, nil
	})
}

func (s *Service) writeFile(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, writePath)
	if err != nil {
		return nil, err
	}
	mode, err := fileMode(req.Mode, 0o644)
	if err != nil {
		return nil, err
	}
	body := in.bodyOr(req.Content)
	return s.fileOp(ctx, c, in, "file.write", req.Sandbox, true, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		n, err := f.WriteFile(ctx, req.Path, body, mode, s.cfg.MaxFileBytes)
		if err != nil {
			return nil, nil, tooBig(err, s.cfg.MaxFileBytes)
		}
		return &api.Written{Path: req.Path, Size: n}, map[string]int64{"bytes": n}, nil
	})
}

// bodyOr is the raw request body, or content when the transport carried
// it in JSON.
func (in *input) bodyOr(content []byte) io.Reader {
	if in.body != nil {
		return in.body
	}
	return bytes.NewReader(content)
}

// tooBig reports a body over the server's cap as too_large.
func tooBig(err error, max int64) error {
	if errors.Is(err, sandbox.ErrTooBig) || isMaxBytesError(err) {
		return api.Errorf(api.CodeTooLarge, "over the server's cap of %d bytes", max)
	}
	return err
}

func (s *Service) listDir(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, filePath)
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.list", req.Sandbox, false, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		ents, err := f.ReadDir(ctx, req.Path)
		if err != nil {
			return nil, nil, err
		}
		if ents == nil {
			ents = []sandbox.FileInfo{}
		}
		return &api.DirList{Path: req.Path, Entries: ents}, map[string]int{"entries": len(ents)}, nil
	})
}

func (s *Service) statFile(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, filePath)
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.stat", req.Sandbox, false, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		fi, err := f.Stat(ctx, req.Path)
		return fi, nil, err
	})
}

func (s *Service) mkdir(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, func(r *api.Mkdir) []string { return []string{r.Path} })
	if err != nil {
		return nil, err
	}
	mode, err := fileMode(req.Mode, 0o755)
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.mkdir", req.Sandbox, true, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Mkdir(ctx, req.Path, mode, req.Parents)
	})
}

func (s *Service) remove(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, func(r *api.Remove) []string { return []string{r.Path} })
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.remove", req.Sandbox, true, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Remove(ctx, req.Path, req.Recursive)
	})
}

func (s *Service) move(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, func(r *api.Move) []string { return []string{r.From, r.To} })
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.move", req.Sandbox, true, []string{req.From, req.To}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Rename(ctx, req.From, req.To)
	})
}

func (s *Service) upload(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, writePath)
	if err != nil {
		return nil, err
	}
	body := &output.CountingReader{R: in.bodyOr(req.Content)}
	// The entries are judged one by one as the stream passes (see
	// judgeTar), not the directory: extracting writes below it.
	return s.fileOp(ctx, c, in, "file.upload", req.Sandbox, true, nil, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		jt := s.judgeTar(ctx, c, m, req.Path, body)
		err := f.PutTar(ctx, req.Path, jt, s.cfg.MaxFileBytes)
		judged, jerr := jt.finish(&in.verdicts)
		if jerr != nil {
			return nil, nil, tooBig(jerr, s.cfg.MaxFileBytes)
		}
		if err != nil {
			return nil, nil, tooBig(err, s.cfg.MaxFileBytes)
		}
		return &api.Written{Path: req.Path, Size: body.N}, map[string]int64{"tar_bytes": body.N, "entries": int64(judged)}, nil
	})
}

// judgedTar passes a tar stream on entry by entry, each judged by the
// policy as a Write of its path under the upload's directory before its
// bytes go on; a refusal ends the stream with that error.
type judgedTar struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	err    error     // the first refusal or parse error
	vs     []verdict // the decisions
	n      int       // entries judged
}

func (s *Service) judgeTar(ctx context.Context, c Caller, m *managed, dir string, body io.Reader) *judgedTar {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	jt := &judgedTar{pr: pr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(jt.done)
		tr := tar.NewReader(body)
		tw := tar.NewWriter(pw)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				jt.err = badTar(err)
				pw.CloseWithError(jt.err)
				return
			}
			jt.n++
			if err := s.judgePaths(ctx, c, m, &jt.vs, api.OpFileUpload, true, path.Join(dir, hdr.Name)); err != nil {
				jt.err = err
				pw.CloseWithError(err)
				return
			}
			if err := tw.WriteHeader(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(tw, tr); err != nil {
				if !errors.Is(err, io.ErrClosedPipe) {
					jt.err = badTar(err)
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return jt
}

func (jt *judgedTar) Read(p []byte) (int, error) { return jt.pr.Read(p) }

// finish stops the judging (the extraction has ended), keeps the
// decisions that were not plain allows (or the first one) in vs, and
// returns the number of entries judged and the refusal, if any.
func (jt *judgedTar) finish(vs *[]verdict) (int, error) {
	jt.pr.CloseWithError(io.ErrClosedPipe)
	jt.cancel()
	<-jt.done
	var kept []verdict
	for _, v := range jt.vs {
		if v.Decided != "allow" {
			kept = append(kept, v)
		}
	}
	if len(kept) == 0 && len(jt.vs) > 0 {
		kept = jt.vs[:1]
	}
	*vs = append(*vs, kept...)
	if jt.err != nil && errors.Is(jt.err, context.Canceled) {
		return jt.n, nil
	}
	return jt.n, jt.err
}

// badTar is the error of a stream that is not a tar archive.
func badTar(err error) error {
	if isMaxBytesError(err) {
		return err
	}
	return &api.Error{Code: api.CodeFile, Errno: "EBADTAR", Message: "not a valid tar stream: " + err.Error()}
}

func (s *Service) download(ctx context.Context, c Caller, in *input) (any, error) {
	req, max, err := s.decodeRead(in)
	if err != nil {
		return nil, err
	}
	return s.downloadTar(ctx, c, in, req, max)
}

// downloadTar is file.download of req, with at most max bytes of file
// content.
func (s *Service) downloadTar(ctx context.Context, c Caller, in *input, req *api.FilePath, max int64) (any, error) {
	return s.fileOp(ctx, c, in, "file.download", req.Sandbox, false, []string{req.Path}, func(ctx context.Context, m *managed, f sandbox.Files) (any, any, error) {
		w := &output.CountingWriter{W: in.out}
		if err := f.GetTar(ctx, req.Path, w, max); err != nil {
			return nil, nil, err
		}
		return &api.FileContent{Path: req.Path, Size: w.N}, map[string]int64{"tar_bytes": w.N}, nil
	})
}
