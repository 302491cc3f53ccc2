package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error codes. Every error of the API is an [Error] with one of them.
const (
	CodeInvalidArgument  = "invalid_argument"    // 400: malformed or out-of-range input
	CodeUnauthenticated  = "unauthenticated"     // 401: missing or wrong token
	CodePermissionDenied = "permission_denied"   // 403: the caller may not do this
	CodeNotFound         = "not_found"           // 404: no such sandbox, process, file or route
	CodeMethodNotAllowed = "method_not_allowed"  // 405
	CodeTimeout          = "timeout"             // 408: the request took longer than allowed
	CodeBusy             = "busy"                // 409: another exec is running in the sandbox
	CodeConflict         = "conflict"            // 409: the target exists or is not empty
	CodeGone             = "gone"                // 410: the sandbox or process has ended
	CodeTooLarge         = "too_large"           // 413: request, file or archive over its cap
	CodeUnsupportedMedia = "unsupported_media"   // 415: body is not JSON where JSON is required
	CodeTooMany          = "resource_exhausted"  // 429: a quota or rate limit reached; 503 with Resource: the daemon lacks a resource
	CodeInternal         = "internal"            // 500: a fault of moat (never for bad input)
	CodeSetup            = "setup_failed"        // 500: the sandbox could not be set up
	CodeUnavailable      = "unavailable"         // 503: the server is shutting down, or its store or audit tape cannot write
	CodeFile             = "file_error"          // 4xx: a file operation failed inside the sandbox (see Errno)
	CodeNotRunning       = "sandbox_not_running" // 409: the sandbox is not running
	CodeUnimplemented    = "unimplemented"       // 501: the server cannot do this here
	CodePolicyDenied     = "policy_denied"       // 403: the policy refused the call, or its approval was refused or expired
)

// CodeStorage (507): a snapshot would take its tenant's snapshots past
// their store quota, or the daemon's data disk is full (the message names
// the path): the call is refused before it runs, or, if it ran, its record
// is not yet on disk (see Error.Result).
const CodeStorage = "insufficient_storage"

// Error is the body of every failed call: HTTP answers it as JSON with the
// status of its code; JSON-RPC carries it as the error's data.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Errno is the kernel's error name inside the sandbox for file_error
	// (ENOENT, EACCES, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EROFS, ELOOP,
	// ENOSPC, ETOOBIG, EBADTAR, EINVAL…).
	Errno string `json:"errno,omitempty"`
	// Rule and Source name the policy rule behind a policy_denied
	// ("deny Exec(git push*)", "user ~/.config/moat/policy.toml:3");
	// Approval is the id of the approval that was refused or expired.
	Rule     string `json:"rule,omitempty"`
	Source   string `json:"source,omitempty"`
	Approval string `json:"approval,omitempty"`
	// Result is, for an exec or start answered insufficient_storage or
	// unavailable after it ran (its record could not be written: the
	// daemon keeps it in memory until the disk takes it), what the call
	// would have answered: the exec's result, the started process.
	Result json.RawMessage `json:"result,omitempty"`
	// Resource names what the daemon itself ran out of, for a
	// resource_exhausted answered 503 (ResourceOpenFiles);
	// a quota or rate limit (429) leaves it empty.
	Resource string `json:"resource,omitempty"`
}

// Resources of the daemon a resource_exhausted names (503): not the
// caller's share, the daemon's own limit.
const (
	// ResourceOpenFiles: the daemon is out of file descriptors (EMFILE:
	// its RLIMIT_NOFILE; ENFILE: the system's fs.file-max).
	ResourceOpenFiles = "open_files"
	// ResourceConnections: the client's address holds as many open
	// connections as the daemon allows one address (the connection is
	// refused before any request is read).
	ResourceConnections = "connections"
)

// Exhausted returns the 503 resource_exhausted of a resource of the
// daemon.
func Exhausted(resource, format string, args ...any) *Error {
	return &Error{Code: CodeTooMany, Resource: resource, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Errno != "" {
		return fmt.Sprintf("%s (%s): %s", e.Code, e.Errno, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is(err, &api.Error{Code: c}) match any Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Errno == "" || t.Errno == e.Errno)
}

// Errorf returns an Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error; anything else is internal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// HTTPStatus is the HTTP status of an error code.
func HTTPStatus(e *Error) int {
	switch e.Code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied, CodePolicyDenied:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeTimeout:
		return http.StatusRequestTimeout
	case CodeBusy, CodeConflict, CodeNotRunning:
		return http.StatusConflict
	case CodeGone:
		return http.StatusGone
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case CodeTooMany:
		if e.Resource != "" {
			// The daemon's own resource: not the caller's fault, retry
			// later or elsewhere.
			return http.StatusServiceUnavailable
		}
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnimplemented:
		return http.StatusNotImplemented
	case CodeStorage:
		return http.StatusInsufficientStorage
	case CodeFile:
		switch e.Errno {
		case "ENOENT", "ENOTDIR":
			return http.StatusNotFound
		case "EACCES", "EPERM", "EROFS":
			return http.StatusForbidden
		case "EEXIST", "ENOTEMPTY", "EISDIR", "EBUSY":
			return http.StatusConflict
		case "ETOOBIG", "ENOSPC", "EFBIG", "ENAMETOOLONG":
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// JSON-RPC 2.0 error codes: the standard ones, and -32000 for every error
// of moat, whose data is the [Error].
const (
	RPCParseError     = -32700
	RPCInvalidRequest = -32600
	RPCMethodNotFound = -32601
	RPCInvalidParams  = -32602
	RPCInternalError  = -32603
	RPCServerError    = -32000
)
