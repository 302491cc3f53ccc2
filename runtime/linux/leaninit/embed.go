//go:build moatinit

package leaninit

import (
	_ "embed"
	"strings"
)

// embedded is cmd/moat-init, given by `make build` through a build overlay.
//
//go:embed moat-init
var embedded []byte

//go:embed moat-init.sha256
var sumFile string

// embeddedSum is the first field of moat-init.sha256 (sha256sum's format).
var embeddedSum = strings.Fields(sumFile + " ")[0]
