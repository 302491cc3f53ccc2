// Package importrules holds no code: its tests check the import rules of
// the module (which packages may depend on which) and the list of
// packages the Go SDK links, client/DEPS.txt.
//
//	go test ./internal/importrules
//	go test ./internal/importrules -run TestClientDeps -update   # rewrite client/DEPS.txt
package importrules
