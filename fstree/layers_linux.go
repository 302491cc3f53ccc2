package fstree

import (
	"context"
	"io"
)

// Layers writes a stack of tar layers into one directory, as an OCI
// runtime applies the layers of an image (package fstree/oci reads the
// image). Each layer is extracted with the rules of ExtractTar, and in
// addition: an entry named ".wh.<name>" removes <name> from what earlier
// layers wrote, ".wh..wh..opq" empties its directory of earlier layers'
// entries, whiteout files are never written, and a layer may replace a
// non-empty directory of an earlier one. The options, limits included,
// apply to the stack as a whole.
//
// A Layers is used by one goroutine: NewLayers, Apply for each layer in
// order, Finish, and Close (always).
type Layers struct {
	w *writer
	x *extractor
}

// NewLayers opens dst, an existing empty directory, for the layers to
// come.
func NewLayers(ctx context.Context, dst string, opt Options) (*Layers, error) {
	w, err := newWriter(ctx, dst, opt)
	if err != nil {
		return nil, err
	}
	x, err := newExtractor(w, true)
	if err != nil {
		w.close()
		return nil, err
	}
	return &Layers{w: w, x: x}, nil
}

// Limits returns the limits in force: Options.Limits with the defaults
// of its zero fields.
func (l *Layers) Limits() Limits { return l.w.lim }

// Apply extracts the next layer, the uncompressed tar stream r, and reads
// r to its end.
func (l *Layers) Apply(r io.Reader) error {
	if err := l.w.canceled(); err != nil {
		return err
	}
	l.x.startLayer()
	return l.x.apply(r)
}

// Finish gives the directories their final metadata once every layer is
// applied, and returns what was written with the tree's digest.
func (l *Layers) Finish() (*Stats, error) { return l.x.finish() }

// Close releases the destination.
func (l *Layers) Close() { l.w.close() }

// CleanName is the path relative to a destination that an archive entry
// name stands for, by the rules of ExtractTar: a leading "/" or "./" is
// stripped, "." components dropped and ".." resolved lexically; a ".."
// that would leave the destination, a NUL byte or an empty name is an
// error. "" is the destination itself.
func CleanName(name string) (string, error) { return cleanName(name) }
