package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strconv"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/audit"
	"github.com/moat-sandbox/moat/sandbox"
)

// The file operations run inside the sandbox through its agent
// (sandbox.Files): paths are the sandbox's own, resolved beneath its root
// by the kernel; nothing here opens a sandbox path on the host.

// fileOp runs f on the sandbox named by id and records it in the audit
// tape with the request (as auditRequest keeps it) and the result summary
// f returns.
func (s *Service) fileOp(ctx context.Context, c Caller, in *input, kind, id string, f func(ctx context.Context, files sandbox.Files) (any, any, error)) (any, error) {
	m, done, err := s.use(c, id)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, summary, err := f(ctx, m.sb.Files())
	in.recorded = true
	ev := audit.Event{Kind: kind, Tenant: c.Tenant, Actor: c.Actor, Sandbox: id, Decision: audit.DecisionAllow, Request: mustJSON(auditRequest(in.req))}
	if summary != nil {
		ev.Result = mustJSON(summary)
	}
	if err != nil {
		err = apiError(err)
		ev.Error = err.Error()
	}
	s.record(ev)
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
	return s.fileOp(ctx, c, in, "file.read", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
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
	return s.fileOp(ctx, c, in, "file.write", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
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
	return s.fileOp(ctx, c, in, "file.list", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
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
	return s.fileOp(ctx, c, in, "file.stat", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
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
	return s.fileOp(ctx, c, in, "file.mkdir", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Mkdir(ctx, req.Path, mode, req.Parents)
	})
}

func (s *Service) remove(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, func(r *api.Remove) []string { return []string{r.Path} })
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.remove", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Remove(ctx, req.Path, req.Recursive)
	})
}

func (s *Service) move(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, func(r *api.Move) []string { return []string{r.From, r.To} })
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.move", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
		return &api.OK{OK: true}, nil, f.Rename(ctx, req.From, req.To)
	})
}

func (s *Service) upload(ctx context.Context, c Caller, in *input) (any, error) {
	req, err := decodeFile(in, writePath)
	if err != nil {
		return nil, err
	}
	body := &countingReader{r: in.bodyOr(req.Content)}
	return s.fileOp(ctx, c, in, "file.upload", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
		if err := f.PutTar(ctx, req.Path, body, s.cfg.MaxFileBytes); err != nil {
			return nil, nil, tooBig(err, s.cfg.MaxFileBytes)
		}
		return &api.Written{Path: req.Path, Size: body.n}, map[string]int64{"tar_bytes": body.n}, nil
	})
}

func (s *Service) download(ctx context.Context, c Caller, in *input) (any, error) {
	req, max, err := s.decodeRead(in)
	if err != nil {
		return nil, err
	}
	return s.fileOp(ctx, c, in, "file.download", req.Sandbox, func(ctx context.Context, f sandbox.Files) (any, any, error) {
		w := &countingWriter{w: in.out}
		if err := f.GetTar(ctx, req.Path, w, max); err != nil {
			return nil, nil, err
		}
		return &api.FileContent{Path: req.Path, Size: w.n}, map[string]int64{"tar_bytes": w.n}, nil
	})
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
