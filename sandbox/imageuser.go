package sandbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxImageID is the highest uid or gid a template's user may have: a
// sandbox's user namespace maps 0–65535.
const MaxImageID = 65535

// ErrImageUser: a template's user cannot be resolved.
var ErrImageUser = errors.New("template user")

// ResolveImageUser resolves a template's user, in an OCI image config's
// form ("", "name", "uid", "name:group", "uid:gid", …), against the
// template's own /etc/passwd and /etc/group contents, as a container
// runtime does: "" is root (0:0); a name must be in passwd; a user without
// a group takes its passwd entry's primary group (0 for a uid that passwd
// does not list); a group name must be in group. Ids above MaxImageID are
// refused.
func ResolveImageUser(user string, passwd, group []byte) (uid, gid uint32, err error) {
	fail := func(format string, a ...any) (uint32, uint32, error) {
		return 0, 0, fmt.Errorf("%w %q: %s", ErrImageUser, user, fmt.Sprintf(format, a...))
	}
	if user == "" {
		return 0, 0, nil
	}
	if strings.ContainsAny(user, "\x00\n") {
		return fail("not a user")
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if u == "" || hasGroup && g == "" {
		return fail("want USER[:GROUP]")
	}
	var (
		primary  uint32
		havePrim bool
	)
	if n, ok := parseID(u); ok {
		uid = n
		if e := lookup(passwd, 2, u); e != nil {
			if p, ok := parseID(e[3]); ok {
				primary, havePrim = p, true
			}
		}
	} else {
		e := lookup(passwd, 0, u)
		if e == nil {
			return fail("no such user in the template's /etc/passwd")
		}
		var ok bool
		if uid, ok = parseID(e[2]); !ok {
			return fail("its /etc/passwd entry has uid %q", e[2])
		}
		if primary, havePrim = parseID(e[3]); !havePrim {
			return fail("its /etc/passwd entry has gid %q", e[3])
		}
	}
	switch {
	case !hasGroup && havePrim:
		gid = primary
	case !hasGroup:
		gid = 0
	default:
		if n, ok := parseID(g); ok {
			gid = n
			break
		}
		e := lookup(group, 0, g)
		if e == nil {
			return fail("no such group in the template's /etc/group")
		}
		var ok bool
		if gid, ok = parseID(e[2]); !ok {
			return fail("its /etc/group entry has gid %q", e[2])
		}
	}
	if uid > MaxImageID || gid > MaxImageID {
		return fail("ids above %d cannot be mapped into a sandbox", MaxImageID)
	}
	return uid, gid, nil
}

// parseID parses a decimal id.
func parseID(s string) (uint32, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// lookup returns the fields of the first line of a passwd or group file
// whose field key equals want (lines with fewer than 4 fields are skipped).
func lookup(file []byte, key int, want string) []string {
	for _, line := range strings.Split(string(file), "\n") {
		f := strings.Split(strings.TrimSuffix(line, "\r"), ":")
		if len(f) >= 4 && f[key] == want {
			return f
		}
	}
	return nil
}
