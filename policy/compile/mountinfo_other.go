//go:build !linux

package compile

type mountinfo struct{}

func readMountinfo() mountinfo { return mountinfo{} }

// idmappable is false where moat has no runtime that binds host paths.
func (mountinfo) idmappable(string) bool { return false }
