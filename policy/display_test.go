package policy

import "testing"

// TestRequestStringWords: a request's text keeps its argv's words apart,
// so that two different commands never read alike (in an approval, the
// audit, an allow-always grant): ["rm -rf /"] is one word.
func TestRequestStringWords(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"git", "push", "origin"}, "Exec(git push origin)"},
		{[]string{"rm -rf /"}, "Exec('rm -rf /')"},
		{[]string{"rm", "-rf", "/"}, "Exec(rm -rf /)"},
		{[]string{"echo", "a  b", "it's", ""}, `Exec(echo 'a  b' 'it'\''s' '')`},
		{[]string{"printf", "\x1b[2K\r"}, "Exec(printf '\x1b[2K\r')"},
	} {
		if got := ExecArgv(c.argv...).String(); got != c.want {
			t.Errorf("%q: %q, want %q", c.argv, got, c.want)
		}
	}
	if a, b := ExecArgv("rm -rf /").String(), ExecArgv("rm", "-rf", "/").String(); a == b {
		t.Errorf("two argvs read alike: %q", a)
	}
}
