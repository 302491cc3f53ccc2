package main

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}
