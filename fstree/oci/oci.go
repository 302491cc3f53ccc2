// Package oci imports OCI container images, read offline (an image
// layout, an oci-archive or a "docker save" archive), into a directory
// of moat's layer store. It reads images with go-containerregistry and
// writes their layers with fstree.Layers, which confines every write to
// the destination; it is a package of its own so that what links fstree
// (the Go SDK's host copies) does not link the image libraries.
package oci

import "errors"

// Sentinel errors, for callers that branch on the cause of a failure
// (besides fstree's: ErrHostile, ErrLimit, ErrTruncated, ErrUnsupported).
var (
	// ErrDigest: a blob or layer does not match its digest.
	ErrDigest = errors.New("digest mismatch")
	// ErrNoImage: Import found no image, or several, for the reference.
	ErrNoImage = errors.New("no matching image")
)

// Image is an imported OCI image's config.
type Image struct {
	Digest     string // the image manifest's digest (docker archives: the config's, their image ID)
	Env        []string
	WorkingDir string
	User       string
	Entrypoint []string
	Cmd        []string
	Layers     int
}
