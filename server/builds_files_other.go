//go:build !linux

package server

import (
	"errors"
	"os"
)

// errBuildFiles: a build's files are read through Linux's openat2
// (fstree); builds run on Linux only.
var errBuildFiles = errors.New("builds need Linux")

func openLogFile(string) (*os.File, error) { return nil, errBuildFiles }

func openArtifact(string, string) (*os.File, error) { return nil, errBuildFiles }
