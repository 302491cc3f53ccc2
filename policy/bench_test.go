package policy

import "testing"

// BenchmarkDecideResolve: path decisions that resolve symlinks on a real
// tree (Lstat of each component).
func BenchmarkDecideResolve(b *testing.B) {
	root := b.TempDir()
	c := Context{Workspace: root + "/ws", Home: root + "/home", Resolve: true}
	e := mustCompile(b, c, layerFile(b, Project, Trusted, []string{"Write(~/.cache/**)"}, nil, []string{"Read(secrets/**)"}))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Decide(ReadPath(root + "/ws/src/pkg/deep/file.go"))
	}
}
