//go:build !linux

package enforce

import (
	"errors"
	"os"
)

func mkdirOwned(dir, name string) (bool, error) {
	return false, errors.New("not supported on this OS")
}

func openDir(p string) (*os.File, error) {
	return nil, errors.New("not supported on this OS")
}
