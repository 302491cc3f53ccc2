//go:build !linux

package enforce

import "errors"

func mkdirOwned(dir, name string) (bool, error) {
	return false, errors.New("not supported on this OS")
}
