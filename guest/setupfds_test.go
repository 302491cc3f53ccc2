package guest

import (
	"errors"
	"slices"
	"testing"
)

// TestSetupFDsRoundTrip: what the host packs, the init unpacks into the
// same roles, with or without trees and cgroup files.
func TestSetupFDsRoundTrip(t *testing.T) {
	for _, in := range []SetupFDs{
		{Trees: []int{10, 11}, Layers: []int{20, 21, 22}, Scratch: 30, CgroupJoin: []int{40, 41, 42, 43}},
		{Layers: []int{20}, Scratch: 30},
	} {
		s := &Setup{Mounts: make([]Mount, len(in.Trees))}
		fds, err := s.PackFDs(in)
		if err != nil {
			t.Fatal(err)
		}
		if s.Layers != len(in.Layers) || s.CgroupJoinFDs != len(in.CgroupJoin) {
			t.Errorf("counts %d layers, %d cgroup files for %+v", s.Layers, s.CgroupJoinFDs, in)
		}
		want := slices.Concat(in.Trees, in.Layers, []int{in.Scratch}, in.CgroupJoin)
		if !slices.Equal(fds, want) {
			t.Errorf("wire order %v, want %v", fds, want)
		}
		out, err := s.UnpackFDs(fds)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out.Trees, in.Trees) || !slices.Equal(out.Layers, in.Layers) || out.Scratch != in.Scratch ||
			!slices.Equal(out.CgroupJoin, in.CgroupJoin) {
			t.Errorf("unpacked %+v, want %+v", out, in)
		}
		// The roles do not share a backing array the caller could
		// append into.
		if len(out.Trees) > 0 {
			_ = append(out.Trees, -1)
			if out.Layers[0] != in.Layers[0] {
				t.Error("appending to Trees overwrote Layers")
			}
		}
	}
}

// TestSetupFDsMismatch: the host refuses to pack trees that do not match
// the mounts, or no layer; the init refuses descriptors that do not
// match the counts, whoever set them.
func TestSetupFDsMismatch(t *testing.T) {
	s := &Setup{Mounts: make([]Mount, 2)}
	if _, err := s.PackFDs(SetupFDs{Trees: []int{1}, Layers: []int{2}}); !errors.Is(err, errSetupFDs) {
		t.Errorf("one tree for two mounts: %v", err)
	}
	if _, err := s.PackFDs(SetupFDs{Trees: []int{1, 2}}); !errors.Is(err, errSetupFDs) {
		t.Errorf("no layer: %v", err)
	}
	for name, c := range map[string]struct {
		s   Setup
		fds int
	}{
		"one short":      {Setup{Layers: 1, CgroupJoinFDs: 1}, 2},
		"one over":       {Setup{Layers: 1}, 3},
		"no layer":       {Setup{Layers: 0}, 1},
		"negative count": {Setup{Layers: 2, CgroupJoinFDs: -1}, 2},
		"trees missing":  {Setup{Mounts: make([]Mount, 3), Layers: 1}, 2},
	} {
		if _, err := c.s.UnpackFDs(make([]int, c.fds)); !errors.Is(err, errSetupFDs) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
