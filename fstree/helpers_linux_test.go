package fstree

import "github.com/moat-sandbox/moat/fstree/internal/treetest"

// The test helpers shared with fstree/oci (fstree/internal/treetest).
type ent = treetest.Ent

var (
	requireRoot = treetest.RequireRoot
	fileEnt     = treetest.File
	dirEnt      = treetest.Dir
	symlinkEnt  = treetest.Symlink
	linkEnt     = treetest.Link
	devEnt      = treetest.Dev
	mkTar       = treetest.Tar
	gz          = treetest.Gzip
	randName    = treetest.RandName
	confined    = treetest.Confined
	lstat       = treetest.Lstat
	absent      = treetest.Absent
	readFile    = treetest.ReadFile
	treeList    = treetest.TreeList
)
