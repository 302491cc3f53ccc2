// Package build holds the end-to-end tests of `moat build`: the real moat
// binary, a private daemon (`moat serve --stdio`, data in a temporary
// directory) and, once, a `moat serve` over HTTP, building with the
// host's real compilers (gcc, the Go toolchain, Python's pip and
// setuptools, all offline) and checking that the same source gives the
// same source digest and the same artifact digests however it is sent;
// then hostile builds (a fork bomb, a full disk, reads of host files,
// sockets, a command that never ends, gigabytes of log, symlinks planted
// in the outputs) and hostile source packages (absolute and ".." paths,
// escaping symlinks, devices, too many or too large files), each beside
// a control that shows the same build passes when the limit allows it.
//
// The tests need root (they run sandboxes) and are skipped without it,
// except under CI=true where they fail instead. They write only in
// temporary directories.
//
// The suite tests the Linux sandbox: its files build on Linux only.
package build
