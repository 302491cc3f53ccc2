package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/bench/schema"
)

// module is the module path of the moat checkout the benchmarks measure.
const module = "github.com/moat-sandbox/moat"

// ErrNoCheckout is a working directory outside a moat checkout.
var ErrNoCheckout = errors.New("not inside a moat checkout")

// Root returns the moat checkout the benchmark runs in: the nearest
// directory at or above the working directory whose go.mod is module
// github.com/moat-sandbox/moat (bench/'s own go.mod is another module).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod of %s above the working directory", ErrNoCheckout, module)
		}
		dir = parent
	}
}

// isRoot reports whether dir's go.mod declares the moat module.
func isRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == module
		}
	}
	return false
}

// DefaultMoat is the default of --moat: bin/moat of the checkout (make
// build puts it there), or bin/moat of the working directory outside one.
func DefaultMoat() string {
	if root, err := Root(); err == nil {
		return filepath.Join(root, "bin", "moat")
	}
	return filepath.Join("bin", "moat")
}

// checkExecutable reports why path is not an executable regular file.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// writeJSON writes r (schema.Encode) to path.
func writeJSON(path string, r schema.Result) error {
	b, err := schema.Encode(r)
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// writeFile writes data to path, creating its directory.
func writeFile(path string, data []byte) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, data, 0o644)
}
