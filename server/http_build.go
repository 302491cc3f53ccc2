package server

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/build"
)

// buildBodySlack is what a build's request body may hold beyond twice the
// source's max_total_bytes: tar headers and padding of many small files,
// the multipart envelope and the settings part.
const buildBodySlack = 64 << 20

// Names of the parts of a multipart/form-data build.create body, in this
// order and no other.
const (
	buildPartSettings = "settings"
	buildPartSource   = "source"
)

// buildBodyCap bounds the body of build.create over HTTP: 2 ×
// max_total_bytes of the operator's build caps + 64 MiB (tar headers and
// padding, the multipart envelope). The source is checked against the
// caps themselves as it is unpacked; this bounds what is read at all.
func (s *Service) buildBodyCap() int64 {
	return 2*s.buildMaxTotalBytes() + buildBodySlack
}

// buildBody binds the body of build.create. A tar (application/x-tar,
// application/gzip, application/octet-stream or no type) becomes in.body
// as it arrives, the settings coming from the query string; a
// multipart/form-data body must hold a part "settings" (JSON: an
// api.CreateBuild without content) then a part "source" (the tar), and
// nothing else. It returns the settings part (nil without one). Nothing
// of the source is buffered: in.body reads the request as the handler
// reads it.
func (s *Service) buildBody(w http.ResponseWriter, r *http.Request, in *input) ([]byte, error) {
	limit := s.buildBodyCap()
	body := &capBody{r: http.MaxBytesReader(w, r.Body, limit), limit: limit}
	mt := ""
	var params map[string]string
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mt, params, err = mime.ParseMediaType(ct); err != nil {
			return nil, api.Errorf(api.CodeUnsupportedMedia, "Content-Type %q: %v", ct, err)
		}
	}
	switch mt {
	case "", "application/x-tar", "application/gzip", "application/x-gzip", "application/octet-stream":
		in.body = body
		return nil, nil
	case "multipart/form-data":
	default:
		return nil, api.Errorf(api.CodeUnsupportedMedia,
			"the body of build.create is a tar (application/x-tar, application/gzip, application/octet-stream) or multipart/form-data, not %s", mt)
	}
	boundary := params["boundary"]
	if boundary == "" {
		return nil, api.Errorf(api.CodeInvalidArgument, "multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(body, boundary)
	settings, err := nextPart(mr, buildPartSettings, 1)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(settings, MaxJSONBody+1))
	if err != nil {
		return nil, partError(buildPartSettings, err)
	}
	if len(b) > MaxJSONBody {
		return nil, api.Errorf(api.CodeTooLarge, "the part %q is at most %d bytes", buildPartSettings, MaxJSONBody)
	}
	if err := checkSettingsPart(b); err != nil {
		return nil, err
	}
	source, err := nextPart(mr, buildPartSource, 2)
	if err != nil {
		return nil, err
	}
	in.body = &sourcePart{part: source, mr: mr}
	return b, nil
}

// nextPart returns the next part of mr, which must be named name (the
// n-th part of the body).
func nextPart(mr *multipart.Reader, name string, n int) (*multipart.Part, error) {
	p, err := mr.NextPart()
	if errors.Is(err, io.EOF) {
		return nil, api.Errorf(api.CodeInvalidArgument, "the multipart body has no part %q (part %d)", name, n)
	}
	if err != nil {
		return nil, partError(name, err)
	}
	if got := p.FormName(); got != name {
		return nil, api.Errorf(api.CodeInvalidArgument, "part %d of the multipart body must be %q, not %q (parts: %q then %q, nothing else)",
			n, name, got, buildPartSettings, buildPartSource)
	}
	return p, nil
}

// partError says why a multipart body could not be read: the body cap
// and the body's pace keep their codes (too_large, timeout), anything
// else is a malformed body.
func partError(name string, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return err
	}
	return api.Errorf(api.CodeInvalidArgument, "reading the multipart body (part %q): %v", name, err)
}

// checkSettingsPart refuses a settings part that is not a JSON object, or
// that carries the source itself (content: the source is the part
// "source").
func checkSettingsPart(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return api.Errorf(api.CodeInvalidArgument, "the part %q must be a JSON object: %v", buildPartSettings, err)
	}
	if _, ok := members["content"]; ok {
		return api.Errorf(api.CodeInvalidArgument, "the part %q cannot hold content: the source is the part %q", buildPartSettings, buildPartSource)
	}
	return nil
}

// sourcePart reads the part "source" of a multipart build body; at its
// end the body must end too (a part after it is invalid_argument).
type sourcePart struct {
	part *multipart.Part
	mr   *multipart.Reader
	err  error // the error of the end, once reached
}

func (s *sourcePart) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.part.Read(p)
	if errors.Is(err, io.EOF) {
		switch next, nerr := s.mr.NextPart(); {
		case errors.Is(nerr, io.EOF):
			err = io.EOF
		case nerr != nil:
			err = partError(buildPartSource, nerr)
		default:
			err = api.Errorf(api.CodeInvalidArgument, "a part %q after %q: the multipart body holds %q then %q, nothing else",
				next.FormName(), buildPartSource, buildPartSettings, buildPartSource)
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// capBody is a request body under http.MaxBytesReader whose overflow is
// both an *api.Error (too_large, naming the cap) and the
// *http.MaxBytesError, for callers that look for either.
type capBody struct {
	r     io.Reader
	limit int64
}

func (b *capBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if isMaxBytesError(err) {
		err = &bodyCapError{
			api:   api.Errorf(api.CodeTooLarge, "the body of build.create is at most %d bytes (2 × the build's max_total_bytes + 64 MiB)", b.limit),
			cause: err,
		}
	}
	return n, err
}

// bodyCapError is a body past its cap: an *api.Error of code too_large
// wrapping the *http.MaxBytesError.
type bodyCapError struct {
	api   *api.Error
	cause error
}

func (e *bodyCapError) Error() string   { return e.api.Message }
func (e *bodyCapError) Unwrap() []error { return []error{e.api, e.cause} }

// buildMaxTotalBytes is the operator's max_total_bytes of a build's
// source (build.Defaults' when the config has none).
func (s *Service) buildMaxTotalBytes() int64 {
	if n := s.cfg.Build.MaxTotalBytes; n > 0 {
		return n
	}
	return build.Defaults.MaxTotalBytes
}

// isSHA256Hex reports whether s is a sha256 digest in lowercase hex.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
