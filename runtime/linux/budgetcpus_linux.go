package linux

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// maxCPUs bounds a parsed CPU list (the kernel's own limit, NR_CPUS, is
// at most 8192).
const maxCPUs = 8192

// pickCPUs chooses the CPUs a budget of cpus CPUs is confined to (see
// budget_linux.go): ceil(cpus) of those moat's cgroups may use, the ones
// fewest live budgets are confined to first, then the lowest numbered. It
// returns nil (no confinement) when cpus is 0, when that would be all of
// them, or when the host cannot confine (no cpuset controller).
func pickCPUs(l *cgroupLayout, cpus float64) []int {
	if cpus <= 0 || !l.cpusetOK {
		return nil
	}
	root, effective := l.cpuset, "cpuset.effective_cpus"
	if l.v2 {
		root, effective = l.mounts[""], "cpuset.cpus.effective"
	}
	b, err := os.ReadFile(filepath.Join(root, effective))
	if err != nil {
		return nil
	}
	avail, err := parseCPUList(string(b))
	want := int(math.Ceil(cpus - 1e-9))
	if err != nil || want >= len(avail) {
		return nil
	}
	claims := map[int]int{}
	ents, _ := os.ReadDir(filepath.Join(root, cgroupParent))
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), budgetPrefix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, cgroupParent, e.Name(), "cpuset.cpus"))
		if err != nil {
			continue
		}
		cs, _ := parseCPUList(string(b))
		for _, c := range cs {
			claims[c]++
		}
	}
	slices.SortStableFunc(avail, func(a, b int) int { return cmp.Compare(claims[a], claims[b]) })
	pick := slices.Clone(avail[:want])
	slices.Sort(pick)
	return pick
}

// parseCPUList reads a kernel CPU list ("0-3,8,10-11"), sorted, without
// duplicates.
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if a < 0 || z < a || z >= maxCPUs {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// formatCPUList writes cpus as a kernel CPU list of single numbers
// ("0,2,3").
func formatCPUList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
