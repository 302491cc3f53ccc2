//go:build !amd64 && !arm64

package seccomp

import "runtime"

// native has no syscall table here: moat supports linux/amd64 and
// linux/arm64 only, and Assemble reports errors.ErrUnsupported.
var native = archInfo{name: runtime.GOARCH}
