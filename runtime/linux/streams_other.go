//go:build !linux

package linux

// WithFramedStreams is only meaningful on Linux.
func WithFramedStreams() Option { return func(*Runtime) {} }
