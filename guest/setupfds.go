package guest

import (
	"errors"
	"fmt"
)

// SetupFDs are the descriptors that travel with a setup message (MsgSetup),
// by role. Their order on the wire is defined here alone: the host packs
// them (Setup.PackFDs) and the init unpacks them (Setup.UnpackFDs), and
// the counts that let the init split them travel in the Setup.
type SetupFDs struct {
	// Trees are the host trees, one detached mount per Setup.Mounts entry,
	// in order.
	Trees []int
	// Layers are the root overlay's lower layers, top first: detached,
	// idmapped, read-only mounts. There is at least one.
	Layers []int
	// Scratch is the scratch tmpfs, a detached mount holding the root's
	// upper layer and overlayfs' work directory ("upper", "work") and
	// /dev/shm ("shm").
	Scratch int
	// CgroupJoin are cgroup v1 "tasks" files the init's main thread
	// writes "0" to, to move itself into the sandbox's cgroup (none on
	// v2, where the host moves the whole init). With Setup.CallCgroups the
	// last one is the pids hierarchy's.
	CgroupJoin []int
}

// errSetupFDs is wrapped by UnpackFDs when the descriptors do not match
// the setup's counts.
var errSetupFDs = errors.New("setup descriptors do not match the setup")

// PackFDs records in s how many descriptors of each role f holds and
// returns them in wire order: trees, layers, scratch, cgroup files.
//
// Preconditions: f.Trees has one descriptor per s.Mounts entry and
// f.Layers at least one.
func (s *Setup) PackFDs(f SetupFDs) ([]int, error) {
	if len(f.Trees) != len(s.Mounts) || len(f.Layers) < 1 {
		return nil, fmt.Errorf("%w: %d trees for %d mounts, %d layers", errSetupFDs, len(f.Trees), len(s.Mounts), len(f.Layers))
	}
	s.Layers, s.CgroupJoinFDs = len(f.Layers), len(f.CgroupJoin)
	fds := make([]int, 0, len(f.Trees)+len(f.Layers)+1+len(f.CgroupJoin))
	fds = append(fds, f.Trees...)
	fds = append(fds, f.Layers...)
	fds = append(fds, f.Scratch)
	return append(fds, f.CgroupJoin...), nil
}

// UnpackFDs splits the descriptors received with s by role, after
// checking that there are as many as s says. On error the caller still
// owns fds (and should close them); the setup came from the host, but a
// mismatch is refused rather than trusted.
func (s *Setup) UnpackFDs(fds []int) (SetupFDs, error) {
	nt, nl, nc := len(s.Mounts), s.Layers, s.CgroupJoinFDs
	if nl < 1 || nc < 0 || len(fds) != nt+nl+1+nc {
		return SetupFDs{}, fmt.Errorf("%w: %d descriptors for %d mounts, %d layers, scratch and %d cgroup files",
			errSetupFDs, len(fds), nt, nl, nc)
	}
	return SetupFDs{
		Trees:      fds[:nt:nt],
		Layers:     fds[nt : nt+nl : nt+nl],
		Scratch:    fds[nt+nl],
		CgroupJoin: fds[nt+nl+1:],
	}, nil
}
