package seccomp

import "strconv"

// TSyncError reports that the kernel could not synchronize the filter to
// every thread of the process (SECCOMP_FILTER_FLAG_TSYNC): thread TID is
// already under a filter stack that is not an ancestor of the caller's. No
// thread, the caller included, got the new filter.
type TSyncError struct {
	// TID is the id of the thread that could not be synchronized.
	TID int
}

// Error implements error.
func (e *TSyncError) Error() string {
	return "TSYNC failed: thread " + strconv.Itoa(e.TID) + " has an incompatible seccomp filter"
}
