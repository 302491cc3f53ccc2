package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/moat-sandbox/moat/bench/render"
	"github.com/moat-sandbox/moat/bench/schema"
)

// errMalformed wraps a results or summary file that exists but cannot be
// read as one: not JSON, the wrong types, another schema version, or
// without its benchmark's main field.
var errMalformed = errors.New("malformed results file")

// load reads every results file of dir (NAME.json of each kind). A
// missing file is not an error; one that cannot be read or decoded is.
func load(dir string) (*render.Inputs, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("results directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("results directory %s: not a directory", dir)
	}
	in := &render.Inputs{Written: map[string]time.Time{}}
	for _, kind := range schema.Kinds() {
		p := filepath.Join(dir, schema.FileName(kind))
		r, err := loadFile(p, kind)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := in.Set(r); err != nil {
			return nil, err
		}
		if st, err := os.Stat(p); err == nil {
			in.Written[kind] = st.ModTime()
		}
	}
	return in, nil
}

// loadFile reads one results file of kind ("" for any).
func loadFile(path, kind string) (schema.Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := schema.Decode(data, kind)
	if err != nil {
		by := "a benchmark"
		if kind != "" {
			by = "bench/" + kind
		}
		return nil, fmt.Errorf("%w %s (written by %s): %v", errMalformed, path, by, err)
	}
	return r, nil
}

// writeSummary writes summary.json.
func writeSummary(path string, s *schema.Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readSummary reads a summary.json written by this report (or by one
// before the summary recorded its schema version).
func readSummary(path string) (*schema.Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s schema.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errMalformed, path, err)
	}
	if s.Schema != 0 && s.Schema != schema.Version {
		return nil, fmt.Errorf("%w %s: %v: version %d, this bench reads %d", errMalformed, path, schema.ErrVersion, s.Schema, schema.Version)
	}
	if s.Figures == nil {
		return nil, fmt.Errorf("%w %s: no \"figures\": not a summary written by bench/report", errMalformed, path)
	}
	seen := map[string]bool{}
	for _, f := range s.Figures {
		if f.ID == "" {
			return nil, fmt.Errorf("%w %s: a figure without an id", errMalformed, path)
		}
		if seen[f.ID] {
			return nil, fmt.Errorf("%w %s: figure %q twice", errMalformed, path, f.ID)
		}
		seen[f.ID] = true
	}
	return &s, nil
}

// compare prints the comparison of two summaries (render.Compare).
func compare(w io.Writer, oldPath, newPath string) error {
	o, err := readSummary(oldPath)
	if err != nil {
		return err
	}
	n, err := readSummary(newPath)
	if err != nil {
		return err
	}
	return render.Compare(w, oldPath, o, newPath, n)
}
