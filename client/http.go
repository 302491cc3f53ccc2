package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// Media types of the HTTP API.
const (
	mediaJSON   = "application/json"
	mediaNDJSON = "application/x-ndjson"
	mediaOctet  = "application/octet-stream"
	mediaTar    = "application/x-tar"
)

// maxErrorBody bounds what is read of a failed answer.
const maxErrorBody = 1 << 20

// httpTransport speaks the HTTP API.
type httpTransport struct {
	base  *url.URL
	token string
	hc    *http.Client
	own   bool // hc is ours: close its idle connections on close
}

func newHTTP(rawURL, token string, hc *http.Client) (*httpTransport, error) {
	if sock, ok := strings.CutPrefix(rawURL, "unix:"); ok {
		// The daemon's --listen unix:/path: HTTP over a unix socket.
		if sock == "" {
			return nil, fmt.Errorf("moat client: daemon URL %q: no socket path", rawURL)
		}
		if hc != nil {
			return nil, errors.New("moat client: WithHTTPClient cannot be combined with a unix: daemon URL")
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		hc = &http.Client{Transport: tr}
		t, err := newHTTP("http://moat", token, hc)
		if err != nil {
			return nil, err
		}
		t.own = true
		return t, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("moat client: daemon URL %q: want http://HOST:PORT, https://HOST[:PORT][/PREFIX] or unix:/PATH", rawURL)
	}
	if token == "" {
		return nil, errors.New("moat client: no API token for " + u.Redacted() + " (set MOAT_TOKEN or MOAT_TOKEN_FILE)")
	}
	if strings.ContainsAny(token, "\r\n\t ") {
		return nil, errors.New("moat client: the API token contains white space")
	}
	u.RawQuery, u.Fragment = "", ""
	t := &httpTransport{base: u, token: token, hc: hc}
	if hc == nil {
		t.hc, t.own = &http.Client{}, true
	}
	return t, nil
}

func (t *httpTransport) close() error {
	if t.own {
		t.hc.CloseIdleConnections()
	}
	return nil
}

// request builds the HTTP request of op: path parameters and (for
// requests without a JSON body) the query string from req's fields.
func (t *httpTransport) request(ctx context.Context, op api.Op, req any, body io.Reader, contentType, accept string) (*http.Request, error) {
	path, query, err := encodeRequest(op, req)
	if err != nil {
		return nil, err
	}
	u := *t.base
	u.RawPath = strings.TrimSuffix(t.base.EscapedPath(), "/") + path
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, fmt.Errorf("moat client: %s: %w", op.Name, err)
	}
	u.RawQuery = query.Encode()
	if body == nil {
		body = http.NoBody
	}
	r, err := http.NewRequestWithContext(ctx, op.Method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("moat client: %s: %w", op.Name, err)
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	r.Header.Set("Accept", accept)
	r.Header.Set("Authorization", "Bearer "+t.token)
	r.Header.Set("User-Agent", "moat-client")
	return r, nil
}

// exchange sends the request of op (req as its JSON body when op takes
// one, else body, of type contentType) and hands a successful answer to
// read; a failed answer becomes an *api.Error.
func (t *httpTransport) exchange(ctx context.Context, op api.Op, req any, body io.Reader, contentType, accept string, read func(*http.Response) error) error {
	if op.In == api.BodyJSON {
		b, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("moat client: %s: encoding the request: %w", op.Name, err)
		}
		body, contentType = bytes.NewReader(b), mediaJSON
	}
	r, err := t.request(ctx, op, req, body, contentType, accept)
	if err != nil {
		return err
	}
	res, err := t.hc.Do(r)
	if err != nil {
		return fmt.Errorf("moat client: %s: %w", op.Name, err)
	}
	defer res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return readError(res)
	}
	return read(res)
}

// decodeAnswer returns a read of [httpTransport.exchange] that decodes a
// JSON answer into resp (nil: discards it).
func decodeAnswer(ctx context.Context, op api.Op, resp any) func(*http.Response) error {
	return func(res *http.Response) error {
		if resp == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			return nil
		}
		if err := json.NewDecoder(res.Body).Decode(resp); err != nil {
			return fmt.Errorf("moat client: %s: decoding the answer: %w", op.Name, ctxErr(ctx, err))
		}
		return nil
	}
}

// readError decodes the api.Error of a failed answer; a body that is not
// one becomes an internal error naming the HTTP status.
func readError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	var e api.Error
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &e
	}
	msg := "unexpected answer " + res.Status
	if text := strings.TrimSpace(string(b)); text != "" && utf8.ValidString(text) {
		text, _, _ = strings.Cut(text, "\n")
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		msg += ": " + text
	}
	return &api.Error{Code: api.CodeInternal, Message: msg}
}

func (t *httpTransport) call(ctx context.Context, op api.Op, req, resp any) error {
	return t.exchange(ctx, op, req, nil, "", mediaJSON, decodeAnswer(ctx, op, resp))
}

func (t *httpTransport) stream(ctx context.Context, op api.Op, req any, onEvent func(api.Event) error, resp any) error {
	return t.exchange(ctx, op, req, nil, "", mediaNDJSON+", "+mediaJSON, func(res *http.Response) error {
		media, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
		if media == mediaJSON && op.Out == api.BodyJSON {
			// A server that answered an exec in one piece.
			return decodeAnswer(ctx, op, resp)(res)
		}
		dec := json.NewDecoder(res.Body)
		for {
			var ev api.Event
			if err := dec.Decode(&ev); err != nil {
				if err == io.EOF {
					if op.Name == api.OpExec {
						// An exec's stream must end with its exit or error.
						return fmt.Errorf("moat client: %s: the stream ended before the process's exit: %w", op.Name, io.ErrUnexpectedEOF)
					}
					return nil
				}
				return fmt.Errorf("moat client: %s: reading the event stream: %w", op.Name, ctxErr(ctx, err))
			}
			var failure error
			switch ev.Type {
			case api.EventError:
				failure = eventError(&ev)
			case api.EventExit:
				if r, ok := resp.(*sandbox.Result); ok && ev.Result != nil {
					*r = *ev.Result
				}
			}
			if err := onEvent(ev); err != nil {
				return err
			}
			if failure != nil || ev.Type == api.EventExit {
				return failure // the stream's last event
			}
		}
	})
}

func (t *httpTransport) readRaw(ctx context.Context, op api.Op, req any, w io.Writer) error {
	return t.exchange(ctx, op, req, nil, "", "*/*", func(res *http.Response) error {
		if _, err := io.Copy(w, res.Body); err != nil {
			return fmt.Errorf("moat client: %s: %w", op.Name, ctxErr(ctx, err))
		}
		return nil
	})
}

func (t *httpTransport) writeRaw(ctx context.Context, op api.Op, req *api.WriteFile, body io.Reader, resp *api.Written) error {
	ct := mediaOctet
	if op.Name == api.OpFileUpload {
		ct = mediaTar
	}
	return t.exchange(ctx, op, req, body, ct, mediaJSON, decodeAnswer(ctx, op, resp))
}

// ctxErr prefers the context's error to the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// encodeRequest returns the escaped path of op with its {parameters}
// filled from req, and the query string: for requests without a JSON
// body, every other non-zero field of req by its json name (raw content
// excluded).
func encodeRequest(op api.Op, req any) (string, url.Values, error) {
	fields, err := jsonFields(req)
	if err != nil {
		return "", nil, fmt.Errorf("moat client: %s: %w", op.Name, err)
	}
	used := map[string]bool{}
	segs := strings.Split(op.Path, "/")
	for i, s := range segs {
		name, ok := strings.CutPrefix(s, "{")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, "}")
		v, found := fields[name]
		if !found {
			return "", nil, fmt.Errorf("moat client: %s: the request has no field %q for its path", op.Name, name)
		}
		vals, err := formatValue(v)
		if err != nil || len(vals) != 1 || vals[0] == "" {
			return "", nil, &api.Error{Code: api.CodeInvalidArgument, Message: fmt.Sprintf("%s: no %s given", op.Name, name)}
		}
		segs[i] = url.PathEscape(vals[0])
		used[name] = true
	}
	q := url.Values{}
	if op.In == api.BodyNone || op.In == api.BodyRaw {
		for name, v := range fields {
			if used[name] || v.IsZero() || v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
				continue
			}
			vals, err := formatValue(v)
			if err != nil {
				return "", nil, fmt.Errorf("moat client: %s: field %s: %w", op.Name, name, err)
			}
			q[name] = vals
		}
	}
	return strings.Join(segs, "/"), q, nil
}

// jsonFields maps the json names of a struct's exported fields to their
// values.
func jsonFields(req any) (map[string]reflect.Value, error) {
	v := reflect.ValueOf(req)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	out := map[string]reflect.Value{}
	if !v.IsValid() || v.Kind() == reflect.Pointer {
		return out, nil
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("request of kind %s, want a struct", v.Kind())
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = v.Field(i)
	}
	return out, nil
}

var timeType = reflect.TypeFor[time.Time]()

// formatValue writes a field as query values: strings as they are, bools
// true/false, numbers in decimal, times RFC 3339 with nanoseconds, string
// slices as repeated values.
func formatValue(v reflect.Value) ([]string, error) {
	if v.Type() == timeType {
		return []string{v.Interface().(time.Time).Format(time.RFC3339Nano)}, nil
	}
	switch v.Kind() {
	case reflect.String:
		return []string{v.String()}, nil
	case reflect.Bool:
		return []string{strconv.FormatBool(v.Bool())}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return []string{strconv.FormatInt(v.Int(), 10)}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []string{strconv.FormatUint(v.Uint(), 10)}, nil
	case reflect.Float32, reflect.Float64:
		return []string{strconv.FormatFloat(v.Float(), 'g', -1, 64)}, nil
	case reflect.Pointer:
		if v.IsNil() {
			return nil, nil
		}
		return formatValue(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.String {
			out := make([]string, v.Len())
			for i := range out {
				out[i] = v.Index(i).String()
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("type %s cannot travel in a query string", v.Type())
}
