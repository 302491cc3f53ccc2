//go:build !linux

package server

import (
	"errors"

	"github.com/moat-sandbox/moat/api"
)

// errArtifacts: the artifact directories are walked with Linux's openat2
// (fstree); elsewhere a step can neither collect outputs nor take inputs.
var errArtifacts = errors.New("workflow outputs and inputs need Linux")

// artifactDir is an open directory under the artifact directory (Linux
// only).
type artifactDir struct{}

func (d *artifactDir) fd() int { return -1 }

// Close closes the directory.
func (d *artifactDir) Close() error { return nil }

func (d *artifactDir) chmod(uint32) error { return errArtifacts }

func (d *artifactDir) mkdirs(string) (*artifactDir, error) { return nil, errArtifacts }

func checkArtifactDir(root, p string) error { return errArtifacts }

func openArtifactDir(root, dir string) (*artifactDir, error) { return nil, errArtifacts }

func (d *artifactDir) typeOf(string) (uint32, error) { return 0, errArtifacts }

func hashArtifacts(*artifactDir) ([]api.WorkflowArtifact, error) { return nil, errArtifacts }

func walkArtifacts(*artifactDir, string, func(string)) ([]artifactFile, error) {
	return nil, errArtifacts
}
