package main

import (
	"os"
	"slices"
	"testing"
)

func TestParseFlagsSystems(t *testing.T) {
	o, err := parseFlags([]string{"--systems", "bwrap, bare,bwrap", "--seed", "7"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.systems, []string{"bwrap", "bare"}) || o.Seed != 7 || o.Rounds != 300 || o.Warmup != 20 {
		t.Errorf("parseFlags: %+v", o)
	}
	if _, err := parseFlags([]string{"--systems", "docker"}, os.Stderr); err == nil {
		t.Error("unknown system accepted")
	}
	if _, err := parseFlags([]string{"--rounds", "0"}, os.Stderr); err == nil {
		t.Error("--rounds 0 accepted")
	}
}
