package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxKeyFileSize bounds an API key file.
const MaxKeyFileSize = 64 << 10

// KeyFunc returns provider p's API key ("" for none). The daemon may give
// its own (WithKeyFunc); the default is ReadKeyFile of p.APIKeyFile.
type KeyFunc func(p Provider) (string, error)

// defaultKey reads p.APIKeyFile, if any.
func defaultKey(p Provider) (string, error) {
	if p.APIKeyFile == "" {
		return "", nil
	}
	return ReadKeyFile(p.APIKeyFile)
}

// ReadKeyFile reads an API key from path: a regular file (not a symlink:
// checked with Lstat, then the opened file is checked to be the same one)
// of at most MaxKeyFileSize bytes, its trailing newline and spaces
// trimmed. The key must not be empty nor hold control characters. Errors
// name the path, never the content.
func ReadKeyFile(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("api key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("api key file %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > MaxKeyFileSize {
		return "", fmt.Errorf("api key file %s: %d bytes, more than %d", path, fi.Size(), MaxKeyFileSize)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("api key file: %w", err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("api key file %s: %w", path, err)
	}
	if !os.SameFile(fi, ofi) || !ofi.Mode().IsRegular() {
		return "", fmt.Errorf("api key file %s: replaced while being opened", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyFileSize+1))
	if err != nil {
		return "", fmt.Errorf("api key file %s: read: %w", path, err)
	}
	if len(b) > MaxKeyFileSize {
		return "", fmt.Errorf("api key file %s: more than %d bytes", path, MaxKeyFileSize)
	}
	key := strings.TrimRight(string(b), "\r\n\t ")
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("api key file %s: %w", path, err)
	}
	return key, nil
}

// checkKey refuses keys that would corrupt an HTTP header.
func checkKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	if len(key) > MaxKeyFileSize {
		return errors.New("key too long")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return errors.New("control characters in the key")
		}
	}
	return nil
}
