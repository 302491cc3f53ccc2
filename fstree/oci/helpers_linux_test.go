package oci

import "github.com/moat-sandbox/moat/fstree/internal/treetest"

// The test helpers shared with fstree (fstree/internal/treetest).
type ent = treetest.Ent

var (
	requireRoot = treetest.RequireRoot
	fileEnt     = treetest.File
	dirEnt      = treetest.Dir
	symlinkEnt  = treetest.Symlink
	linkEnt     = treetest.Link
	mkTar       = treetest.Tar
	gz          = treetest.Gzip
	confined    = treetest.Confined
	absent      = treetest.Absent
	readFile    = treetest.ReadFile
	treeList    = treetest.TreeList
)
