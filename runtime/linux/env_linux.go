package linux

import (
	"strings"

	"github.com/moat-sandbox/moat/sandbox"
)

// defaultEnv is the environment every process starts from; the host's
// environment never reaches a sandbox.
func defaultEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + sandbox.HomeDir,
		"TMPDIR=/tmp",
		"USER=sandbox",
		"LOGNAME=sandbox",
		"SHELL=/bin/sh",
		"NO_COLOR=1",
		"TERM=dumb",
		"LANG=C.UTF-8",
		"PAGER=cat",
		"GIT_PAGER=cat",
	}
}

// mergeEnv applies KEY=VALUE overrides on top of base; a later key wins.
func mergeEnv(base, over []string) ([]string, error) {
	out := append([]string(nil), base...)
	idx := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = i
	}
	if err := sandbox.CheckEnv(over); err != nil {
		return nil, err
	}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out, nil
}
