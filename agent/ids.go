package agent

import (
	"crypto/rand"
	"encoding/hex"
)

// runIDPrefix starts every run id.
const runIDPrefix = "ag-"

// newRunID returns a fresh run id: "ag-" and 12 lowercase hex digits.
func newRunID() string {
	var b [6]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return runIDPrefix + hex.EncodeToString(b[:])
}

// validRunID reports whether id has the shape of a run id.
func validRunID(id string) bool {
	if len(id) != len(runIDPrefix)+12 || id[:len(runIDPrefix)] != runIDPrefix {
		return false
	}
	for _, c := range id[len(runIDPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
