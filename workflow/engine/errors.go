package engine

import (
	"errors"

	"github.com/moat-sandbox/moat/workflow"
)

// Errors the engine's callers branch on (the server maps them to 404, 409
// and 400). Every error the engine returns for one of these cases wraps
// the sentinel, with the details in its text.
var (
	// ErrNotFound: no run of that id belongs to the tenant, or the run has
	// no such step or group.
	ErrNotFound = errors.New("workflow run not found")
	// ErrConflict: the run is not in a state that allows the call
	// (cancelling an ended run, resuming a running one, adding a step to a
	// group that ended, resuming from a snapshot that was deleted).
	ErrConflict = errors.New("workflow run state conflict")
	// ErrInvalid: the document (or an added step) is invalid. It is
	// workflow.ErrInvalid, so errors.Is matches either name.
	ErrInvalid = workflow.ErrInvalid
	// ErrClosed: the engine is closed (the daemon is stopping).
	ErrClosed = errors.New("workflow engine is closed")
	// ErrCapacity: a Backend's Create refused for want of room that frees
	// up by itself (a sandbox quota, a full daemon). The engine does not
	// count it as a failed attempt: it waits until one of its sandboxes
	// is deleted, or a while, and creates again.
	ErrCapacity = errors.New("no capacity for another sandbox now")
)
