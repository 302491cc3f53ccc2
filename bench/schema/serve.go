package schema

// Serve is one `moat serve` daemon a benchmark started and stopped.
type Serve struct {
	// Role names the daemon among several: "new", "old", "flood, small
	// budget"…
	Role    string `json:"role,omitempty"`
	Command string `json:"command"`
	URL     string `json:"url,omitempty"`
	// StopMs is SIGTERM to exit; ExitedOK says it exited 0.
	StopMs   float64 `json:"stop_ms"`
	ExitedOK bool    `json:"exited_ok"`
	// Connections counts the TCP connections the benchmark's clients
	// opened to it (keep-alive reuses them); 0 when not counted.
	Connections int64 `json:"connections,omitempty"`
	// LogLines counts its log lines, LogProblems those at WARN or ERROR;
	// FirstProblems are the first few of them, verbatim.
	LogLines      int      `json:"log_lines"`
	LogProblems   int      `json:"log_problems"`
	FirstProblems []string `json:"first_problems,omitempty"`
}
