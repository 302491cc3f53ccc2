package build

import (
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/api"
)

func TestEnv(t *testing.T) {
	std := []string{
		"HOME=/build/home", "TMPDIR=/build/tmp", "XDG_CACHE_HOME=/build/cache",
		"LANG=C.UTF-8", "SOURCE_DATE_EPOCH=315532800",
	}
	for _, c := range []struct {
		name             string
		template, caller []string
		epoch            int64
		want             []string
	}{
		{
			name:  "standard only",
			epoch: DefaultEpoch,
			want:  append([]string{"PATH=" + DefaultPath}, std...),
		},
		{
			name:     "the template's PATH survives, in its place",
			template: []string{"GOROOT=/opt/go", "PATH=/opt/go/bin:/usr/bin"},
			epoch:    DefaultEpoch,
			want:     append(slices.Clone(std), "GOROOT=/opt/go", "PATH=/opt/go/bin:/usr/bin"),
		},
		{
			name:     "the caller's replace in place, after the template's",
			template: []string{"GOROOT=/opt/go", "PATH=/opt/go/bin", "GOFLAGS=-mod=vendor"},
			caller:   []string{"GOFLAGS=-trimpath", "LANG=de_DE.UTF-8", "PATH=/x", "CGO_ENABLED=0"},
			epoch:    DefaultEpoch,
			want: []string{
				"HOME=/build/home", "TMPDIR=/build/tmp", "XDG_CACHE_HOME=/build/cache",
				"LANG=de_DE.UTF-8", "SOURCE_DATE_EPOCH=315532800",
				"GOROOT=/opt/go", "PATH=/x", "GOFLAGS=-trimpath", "CGO_ENABLED=0",
			},
		},
		{
			name:   "the caller's PATH, first-class",
			caller: []string{"PATH=/mine"},
			epoch:  DefaultEpoch,
			want:   append(slices.Clone(std), "PATH=/mine"),
		},
		{
			name:     "the build's places and epoch are fixed",
			template: []string{"HOME=/root", "TMPDIR=/tmp", "SOURCE_DATE_EPOCH=1", "junk", "=x"},
			caller:   []string{"XDG_CACHE_HOME=/c", "SOURCE_DATE_EPOCH=7"},
			epoch:    7,
			want: []string{
				"PATH=" + DefaultPath, "HOME=/build/home", "TMPDIR=/build/tmp", "XDG_CACHE_HOME=/build/cache",
				"LANG=C.UTF-8", "SOURCE_DATE_EPOCH=7",
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Env(c.template, c.caller, c.epoch); !slices.Equal(got, c.want) {
				t.Errorf("Env =\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

func TestEpoch(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want int64
	}{
		{nil, DefaultEpoch},
		{[]string{"A=1"}, DefaultEpoch},
		{[]string{"SOURCE_DATE_EPOCH=0"}, 0},
		{[]string{"SOURCE_DATE_EPOCH=1700000000", "B=2"}, 1700000000},
		{[]string{"SOURCE_DATE_EPOCH=-5"}, DefaultEpoch},
		{[]string{"SOURCE_DATE_EPOCH="}, DefaultEpoch},
	} {
		if got := Epoch(&api.CreateBuild{Env: c.env}); got != c.want {
			t.Errorf("Epoch(%q) = %d, want %d", c.env, got, c.want)
		}
	}
}

func TestEnvNames(t *testing.T) {
	got := EnvNames([]string{"PATH=/bin", "B=1", "A=", "B=2", "junk"})
	if want := []string{"A", "B", "PATH"}; !slices.Equal(got, want) {
		t.Errorf("EnvNames = %q, want %q", got, want)
	}
}
