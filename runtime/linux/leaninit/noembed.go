//go:build !moatinit

package leaninit

// Without the build tag moatinit nothing is embedded.
var (
	embedded    []byte
	embeddedSum string
)
