//go:build !linux

package compile

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

var errNotExist = os.ErrNotExist

func openRegular(p string, max int64) (*os.File, int64, error) {
	return nil, 0, errors.New("not supported on this OS")
}

func readSmallRegular(p string, max int64) ([]byte, error) {
	return nil, errors.New("not supported on this OS")
}
