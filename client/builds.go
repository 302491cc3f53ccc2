package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"

	"github.com/moat-sandbox/moat/api"
)

// MaxStdioBuildSource caps the source [Client.Build] sends over the stdio
// transport: JSON-RPC carries it base64-encoded in one request line, which
// both sides hold in memory, and the daemon's line cap follows its max
// file bytes (64 MiB by default). A larger source fails before anything
// is sent (code too_large): send it over HTTP, which streams it, or gzip
// it (the daemon detects gzip by its magic).
const MaxStdioBuildSource = 64 << 20

// buildSender is a transport that can send build.create with its source.
type buildSender interface {
	sendBuild(ctx context.Context, req *api.CreateBuild, source io.Reader, resp *api.Build) error
}

// Build checks the source package read from source (a tar, plain or
// gzip) and builds it in a sandbox as req says (req.Content is ignored
// when source is not nil; with source nil it is the tar). Unless
// req.Detach is set it answers at the build's end; a build that ran and
// failed, or whose source was refused, is not an error: its Status and
// Reason say what happened. Errors are the daemon's refusals of the
// request itself (invalid_argument for settings past the operator's
// caps, too_large for a body past the daemon's cap) and transport
// failures.
//
// Over HTTP the source is streamed as the part "source" of a
// multipart/form-data body after the settings (a JSON part "settings"),
// so nothing of it is buffered and no setting (env values included)
// travels in the URL. Over stdio the source is read whole into the
// request, at most [MaxStdioBuildSource] bytes.
func (c *Client) Build(ctx context.Context, req api.CreateBuild, source io.Reader) (*api.Build, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if source == nil {
		source = bytes.NewReader(req.Content)
	}
	req.Content = nil
	bs, ok := c.t.(buildSender)
	if !ok {
		return nil, fmt.Errorf("moat client: %s: the transport cannot send a build's source", api.OpBuildCreate)
	}
	var b api.Build
	if err := bs.sendBuild(ctx, &req, source, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// GetBuild describes one build of the caller's ([IsNotFound] when there is
// no such build, or it is another tenant's). With wait it answers at the
// build's end.
func (c *Client) GetBuild(ctx context.Context, id string, wait bool) (*api.Build, error) {
	var b api.Build
	if err := c.call(ctx, api.OpBuildGet, api.BuildRef{ID: id, Wait: wait}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Builds lists the caller's builds, newest first.
func (c *Client) Builds(ctx context.Context, req api.ListBuilds) ([]api.Build, error) {
	var l api.BuildList
	if err := c.call(ctx, api.OpBuildList, req, &l); err != nil {
		return nil, err
	}
	return l.Builds, nil
}

// BuildLog writes the log of build id (stdout and stderr interleaved, as
// the command wrote them) from byte offset to w. With follow it returns
// when the build has ended, after its whole log (up to the log cap). It
// returns the build as it is at the stream's end. An error w returns ends
// the stream and is returned.
func (c *Client) BuildLog(ctx context.Context, id string, offset int64, follow bool, w io.Writer) (*api.Build, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	var b api.Build
	var werr error
	err := c.t.stream(ctx, op(api.OpBuildLog), api.BuildLogRequest{ID: id, Offset: offset, Follow: follow}, func(ev api.Event) error {
		if ev.Type == api.EventError {
			return nil // the transport returns it
		}
		if p := ev.Output(); len(p) > 0 {
			if _, err := w.Write(p); err != nil {
				werr = err
				return err
			}
		}
		return nil
	}, &b)
	if werr != nil {
		return nil, fmt.Errorf("moat client: %s: writing the log: %w", api.OpBuildLog, werr)
	}
	if err != nil {
		return nil, err
	}
	if b.ID == "" {
		// Over HTTP the stream carries the log only: the build as it is
		// at the stream's end is asked for (after a follow, the ended
		// build).
		return c.GetBuild(ctx, id, false)
	}
	return &b, nil
}

// BuildArtifact writes the artifact of build id whose sha256 (hex) is
// digest to w. Over stdio it travels whole in one answer: at most the
// daemon's max file bytes (else too_large).
func (c *Client) BuildArtifact(ctx context.Context, id, digest string, w io.Writer) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return c.t.readRaw(ctx, op(api.OpBuildArtifact), api.BuildArtifactRef{ID: id, Digest: digest}, w)
}

// DeleteBuild removes a build with its log and artifacts (a running build
// is stopped first) and returns it as it was last.
func (c *Client) DeleteBuild(ctx context.Context, id string) (*api.Build, error) {
	var b api.Build
	if err := c.call(ctx, api.OpBuildDelete, api.BuildRef{ID: id}, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// sendBuild streams a multipart/form-data body: the part "settings"
// (req as JSON), then the part "source" (the tar, as it is read).
func (t *httpTransport) sendBuild(ctx context.Context, req *api.CreateBuild, source io.Reader, resp *api.Build) error {
	o := op(api.OpBuildCreate)
	settings, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("moat client: %s: encoding the settings: %w", o.Name, err)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(writeBuildBody(mw, settings, source))
	}()
	// The request carries no query: every setting is in the part.
	err = t.exchange(ctx, o, struct{}{}, pr, mw.FormDataContentType(), mediaJSON, decodeAnswer(ctx, o, resp))
	// The writer stops at its next write once the reader is closed (the
	// daemon answered before reading the whole body, or the call failed).
	pr.Close()
	<-done
	return err
}

// writeBuildBody writes the two parts of a multipart build body.
func writeBuildBody(mw *multipart.Writer, settings []byte, source io.Reader) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="settings"`)
	h.Set("Content-Type", mediaJSON)
	p, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := p.Write(settings); err != nil {
		return err
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="source"; filename="source.tar"`)
	h.Set("Content-Type", mediaTar)
	if p, err = mw.CreatePart(h); err != nil {
		return err
	}
	if _, err := io.Copy(p, source); err != nil {
		return fmt.Errorf("reading the source: %w", err)
	}
	return mw.Close()
}

// sendBuild reads the source whole (at most MaxStdioBuildSource bytes)
// into req.Content.
func (t *stdioTransport) sendBuild(ctx context.Context, req *api.CreateBuild, source io.Reader, resp *api.Build) error {
	b, err := io.ReadAll(io.LimitReader(source, MaxStdioBuildSource+1))
	if err != nil {
		return fmt.Errorf("moat client: %s: reading the source: %w", api.OpBuildCreate, err)
	}
	if len(b) > MaxStdioBuildSource {
		return &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf(
			"%s: over stdio (JSON-RPC) a build's source is at most %d bytes; gzip it, or talk to a daemon over HTTP (MOAT_URL)", api.OpBuildCreate, MaxStdioBuildSource)}
	}
	params := *req
	params.Content = b
	if params.Content == nil {
		params.Content = []byte{}
	}
	return t.roundTrip(ctx, api.OpBuildCreate, &params, nil, resp)
}
