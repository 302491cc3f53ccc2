package agent

// Progress is where one agent of a run is, besides its conversation
// (Record.Progress).
type Progress struct {
	// Turns counts the agent's model calls since its current task began
	// (max_turns bounds it).
	Turns int `json:"turns,omitempty"`
	// Call is the id of the tool call under way: its tool.call (or
	// handoff) is journalled and its result is not. After a restart a
	// handoff's agent carries on; any other call is answered to the model
	// as interrupted, never run again.
	Call string `json:"call,omitempty"`
	// CallSandbox is the sandbox made for that call alone (sandbox
	// per_call), deleted after it.
	CallSandbox string `json:"call_sandbox,omitempty"`
}

// clone returns a copy of p.
func (p *Progress) clone() *Progress {
	c := *p
	return &c
}
