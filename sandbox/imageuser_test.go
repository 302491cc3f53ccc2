package sandbox

import (
	"errors"
	"testing"
)

func TestResolveImageUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\napp:x:101:102::/app:/bin/sh\nbad:x:7:z::/:/bin/sh\nbig:x:70000:70000::/:/bin/sh\n")
	group := []byte("root:x:0:\nnode:x:1000:\nstaff:x:50:\n")
	for _, c := range []struct {
		user     string
		uid, gid uint32
		bad      bool
	}{
		{"", 0, 0, false},
		{"root", 0, 0, false},
		{"0", 0, 0, false},
		{"node", 1000, 1000, false},
		{"app", 101, 102, false},
		{"101", 101, 102, false}, // a listed uid takes its primary group
		{"4242", 4242, 0, false}, // an unlisted uid gets group 0
		{"app:staff", 101, 50, false},
		{"app:77", 101, 77, false},
		{"4242:4243", 4242, 4243, false},
		{"nobody-here", 0, 0, true},
		{"app:nogroup", 0, 0, true},
		{"bad", 0, 0, true},
		{"big", 0, 0, true},
		{"70000", 0, 0, true},
		{"1:70000", 0, 0, true},
		{":0", 0, 0, true},
		{"0:", 0, 0, true},
		{"a\x00b", 0, 0, true},
	} {
		uid, gid, err := ResolveImageUser(c.user, passwd, group)
		if c.bad {
			if !errors.Is(err, ErrImageUser) {
				t.Errorf("%q: got %d:%d, %v; want an ErrImageUser", c.user, uid, gid, err)
			}
			continue
		}
		if err != nil || uid != c.uid || gid != c.gid {
			t.Errorf("%q: got %d:%d, %v; want %d:%d", c.user, uid, gid, err, c.uid, c.gid)
		}
	}
	// No passwd at all (a scratch image): names fail, numbers work.
	if _, _, err := ResolveImageUser("node", nil, nil); err == nil {
		t.Error("a name resolved without a passwd file")
	}
	if uid, gid, err := ResolveImageUser("1000", nil, nil); err != nil || uid != 1000 || gid != 0 {
		t.Errorf("1000 without passwd: %d:%d %v", uid, gid, err)
	}
}
