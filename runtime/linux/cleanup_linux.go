package linux

// cleanup is a stack of undo steps (the idea of gVisor's pkg/cleanup): as
// create makes each part of a sandbox it Adds the step that undoes it;
// on failure Clean undoes them all, the last made first; on success
// Release forgets them, the sandbox then owning what they would have
// undone. The usual shape:
//
//	var cu cleanup
//	defer cu.Clean()
//	... cu.Add(undo) after each step ...
//	cu.Release()
//	return result, nil
//
// A cleanup is used by one goroutine. Its zero value is ready to use.
type cleanup struct{ fns []func() }

// Add pushes f, to run at Clean unless Release comes first.
func (c *cleanup) Add(f func()) { c.fns = append(c.fns, f) }

// Clean runs the steps not released, the last added first, once.
func (c *cleanup) Clean() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// Release drops every step: a later Clean does nothing.
func (c *cleanup) Release() { c.fns = nil }
