package linux

import (
	"slices"
	"testing"

	moatruntime "github.com/moat-sandbox/moat/runtime"
)

// Importing the package registers it, on every OS (off Linux its factory
// says it needs Linux).
func TestRegistered(t *testing.T) {
	if !slices.Contains(moatruntime.Names(), Name) || moatruntime.Default != Name {
		t.Fatalf("registered %v, default %q; want %q among them", moatruntime.Names(), moatruntime.Default, Name)
	}
	if c, err := moatruntime.Probe(Name); err != nil || len(c) == 0 {
		t.Fatalf("probe: %v %v", c, err)
	}
}
