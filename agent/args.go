package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// A tool call's arguments are decoded strictly: a JSON object whose every
// field is the tool's, of the right type, nothing after it. What is wrong
// is a badArgs error, answered to the model as a tool error; nothing runs.

// badArgs is a tool call's arguments that are not valid.
type badArgs struct{ msg string }

func (e *badArgs) Error() string { return "bad arguments: " + e.msg }

// bad returns a badArgs error.
func bad(format string, args ...any) error { return &badArgs{msg: fmt.Sprintf(format, args...)} }

// decodeArgs decodes raw into v (a pointer to the tool's argument struct).
func decodeArgs(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	if len(raw) > MaxArguments {
		return bad("%d bytes: at most %d", len(raw), MaxArguments)
	}
	if raw[0] != '{' {
		return bad("want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("data after the JSON object")
	}
	return nil
}

// checkPath checks a path argument: given, at most maxPath bytes, UTF-8,
// without NUL. The path is resolved inside the sandbox by its guest (it
// can never name a host path); it is passed on as given.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return bad("%s is required", field)
	case len(p) > maxPath:
		return bad("%s is %d bytes: at most %d", field, len(p), maxPath)
	case strings.IndexByte(p, 0) >= 0:
		return bad("%s contains a NUL byte", field)
	case !utf8.ValidString(p):
		return bad("%s is not UTF-8", field)
	}
	return nil
}

// checkCwd checks a working directory: a path inside the sandbox,
// absolute, or relative to the sandbox's working directory without
// climbing out of it with "..". It returns it cleaned ("" for none).
func checkCwd(cwd string) (string, error) {
	if cwd == "" {
		return "", nil
	}
	if err := checkPath("cwd", cwd); err != nil {
		return "", err
	}
	c := path.Clean(cwd)
	if !path.IsAbs(c) && (c == ".." || strings.HasPrefix(c, "../")) {
		return "", bad("cwd %q climbs out of the working directory: give an absolute path inside the sandbox", cwd)
	}
	return c, nil
}

// checkCommand checks a shell command argument.
func checkCommand(cmd *string) (string, error) {
	switch {
	case cmd == nil || strings.TrimSpace(*cmd) == "":
		return "", bad("command is required")
	case len(*cmd) > maxCommand:
		return "", bad("command is %d bytes: at most %d", len(*cmd), maxCommand)
	case strings.IndexByte(*cmd, 0) >= 0:
		return "", bad("command contains a NUL byte")
	}
	return *cmd, nil
}

// timeoutOf is the timeout of a call: the agent's limit, or the model's
// timeout_s when shorter. A longer one is cut to the limit, never
// widened; note says so.
func timeoutOf(limit time.Duration, seconds *int64) (d time.Duration, note string, err error) {
	if seconds == nil {
		return limit, "", nil
	}
	if *seconds < 1 {
		return 0, "", bad("timeout_s must be at least 1")
	}
	if *seconds > int64(limit/time.Second) {
		return limit, fmt.Sprintf("timeout_s %d is over this agent's limit: cut to %s", *seconds, limit), nil
	}
	return time.Duration(*seconds) * time.Second, "", nil
}

// fileMode checks write_file's mode: octal permissions without the
// setuid, setgid and sticky bits ("0644" by default).
var fileMode = regexp.MustCompile(`^0?[0-7]{3}$`)

// checkURL checks fetch_url's url: http or https, a host, no
// credentials. Where it may go is the egress policy's to say.
func checkURL(raw string) (string, error) {
	if raw == "" {
		return "", bad("url is required")
	}
	if len(raw) > 8192 || strings.ContainsFunc(raw, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return "", bad("url is too long or has control characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", bad("url: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", bad("url: scheme %q: want http or https", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return "", bad("url: no host")
	case u.User != nil:
		return "", bad("url: credentials in a URL are refused")
	}
	return u.String(), nil
}

// checkSignal normalises a signal name ("SIGTERM", "term" → "TERM").
func checkSignal(s string) (string, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "SIG")
	if !slices.Contains(signals, n) {
		return "", bad("signal %q: want one of %s", s, strings.Join(signals, ", "))
	}
	return n, nil
}
