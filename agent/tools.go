package agent

import (
	"encoding/json"
	"fmt"

	"github.com/moat-sandbox/moat/agent/model"
)

// Tool names.
const (
	ToolShellExec     = "shell_exec"
	ToolWriteFile     = "write_file"
	ToolReadFile      = "read_file"
	ToolListDir       = "list_dir"
	ToolFetchURL      = "fetch_url"
	ToolProcessStart  = "process_start"
	ToolProcessOutput = "process_output"
	ToolProcessStdin  = "process_stdin"
	ToolProcessSignal = "process_signal"
	ToolHandoff       = "handoff"
)

// ToolNames are every tool an agent may be offered, in the order the
// documentation lists them.
var ToolNames = []string{
	ToolShellExec, ToolWriteFile, ToolReadFile, ToolListDir, ToolFetchURL,
	ToolProcessStart, ToolProcessOutput, ToolProcessStdin, ToolProcessSignal, ToolHandoff,
}

// Bounds of tool calls and of what their results show the model.
const (
	// MaxArguments bounds a tool call's arguments (JSON).
	MaxArguments = 4 << 20
	// maxPath bounds a path argument; maxCommand a command.
	maxPath    = 4096
	maxCommand = 64 << 10
	// maxTask bounds a task (a run's, a handoff's).
	maxTask = 1 << 20
	// OutputHead and OutputTail are what a result keeps of a long output:
	// its first and last bytes, with "[… N bytes elided …]" between.
	OutputHead = 8 << 10
	OutputTail = 8 << 10
	// ReadFileCap is the most of a file read_file shows; a longer file
	// shows its first ReadFileCap bytes and a note.
	ReadFileCap = 64 << 10
	// FetchCap is the most of a body fetch_url reads.
	FetchCap = 256 << 10
	// maxEntries is the most entries list_dir shows.
	maxEntries = 500
)

// signals are the signals process_signal may send.
var signals = []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"}

// toolSpecs are the tools' descriptions and JSON schemas, as the model
// sees them. handoff's "to" gets the agent's list as its enum (schemas).
var toolSpecs = map[string]model.Tool{
	ToolShellExec: {
		Name: ToolShellExec,
		Description: "Run a shell command (/bin/sh -c) inside your sandbox and wait for it to end. " +
			"Returns the exit code and the head and tail of stdout and stderr.",
		Parameters: schema(`{
			"command": {"type": "string", "description": "The shell command."},
			"cwd": {"type": "string", "description": "Working directory inside the sandbox: absolute, or relative to the sandbox's working directory."},
			"timeout_s": {"type": "integer", "minimum": 1, "description": "Seconds before the command is killed (at most the agent's limit)."}
		}`, "command"),
	},
	ToolWriteFile: {
		Name:        ToolWriteFile,
		Description: "Write a file inside your sandbox (created or replaced), creating nothing else.",
		Parameters: schema(`{
			"path": {"type": "string", "description": "The file's path inside the sandbox."},
			"content": {"type": "string", "description": "The whole content (UTF-8 text)."},
			"mode": {"type": "string", "pattern": "^0?[0-7]{3}$", "description": "Octal permissions of a new file, e.g. 0644 or 0755."}
		}`, "path", "content"),
	},
	ToolReadFile: {
		Name:        ToolReadFile,
		Description: fmt.Sprintf("Read a file inside your sandbox (at most its first %d bytes are shown).", ReadFileCap),
		Parameters: schema(`{
			"path": {"type": "string", "description": "The file's path inside the sandbox."}
		}`, "path"),
	},
	ToolListDir: {
		Name:        ToolListDir,
		Description: "List a directory inside your sandbox: each entry's name, type and size.",
		Parameters: schema(`{
			"path": {"type": "string", "description": "The directory's path inside the sandbox."}
		}`, "path"),
	},
	ToolFetchURL: {
		Name:        ToolFetchURL,
		Description: "Fetch an http or https URL through your sandbox's egress proxy (its allowlist decides). Returns the status, content type and the body's text.",
		Parameters: schema(`{
			"url": {"type": "string", "description": "The URL (http or https)."}
		}`, "url"),
	},
	ToolProcessStart: {
		Name:        ToolProcessStart,
		Description: "Start a shell command (/bin/sh -c) in the background inside your sandbox; returns its process id for process_output, process_stdin and process_signal.",
		Parameters: schema(`{
			"command": {"type": "string", "description": "The shell command."},
			"cwd": {"type": "string", "description": "Working directory inside the sandbox."}
		}`, "command"),
	},
	ToolProcessOutput: {
		Name:        ToolProcessOutput,
		Description: "Read a background process's output so far (after the sequence number given) and whether it has ended.",
		Parameters: schema(`{
			"process": {"type": "integer", "minimum": 1, "description": "The process id process_start returned."},
			"after": {"type": "integer", "minimum": 0, "description": "Read the output after this sequence number (the 'next' of the previous read)."}
		}`, "process"),
	},
	ToolProcessStdin: {
		Name:        ToolProcessStdin,
		Description: "Write to a background process's standard input; eof closes it.",
		Parameters: schema(`{
			"process": {"type": "integer", "minimum": 1},
			"data": {"type": "string"},
			"eof": {"type": "boolean"}
		}`, "process"),
	},
	ToolProcessSignal: {
		Name:        ToolProcessSignal,
		Description: "Send a signal to a background process's group.",
		Parameters: schema(`{
			"process": {"type": "integer", "minimum": 1},
			"signal": {"type": "string", "enum": ["TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"]}
		}`, "process", "signal"),
	},
	ToolHandoff: {
		Name:        ToolHandoff,
		Description: "Hand a task to another agent and get its final answer back. The agent keeps its conversation between handoffs.",
		Parameters: schema(`{
			"to": {"type": "string", "description": "The agent's name."},
			"task": {"type": "string", "description": "The task, self-contained."}
		}`, "to", "task"),
	},
}

// schema makes an object schema of props (a JSON object of properties)
// with required keys and no other properties allowed.
func schema(props string, required ...string) json.RawMessage {
	var p map[string]any
	if err := json.Unmarshal([]byte(props), &p); err != nil {
		panic("agent: bad tool schema: " + err.Error())
	}
	b, err := json.Marshal(map[string]any{
		"type": "object", "properties": p, "required": required, "additionalProperties": false,
	})
	if err != nil {
		panic("agent: bad tool schema: " + err.Error())
	}
	return b
}

// schemas returns the tools offered to a, as the model sees them.
func schemas(a *Agent) []model.Tool {
	out := make([]model.Tool, 0, len(a.Tools))
	for _, name := range a.Tools {
		t := toolSpecs[name]
		if name == ToolHandoff {
			t.Parameters = handoffSchema(a.Handoff)
		}
		out = append(out, t)
	}
	return out
}

// handoffSchema is handoff's schema with "to" limited to names.
func handoffSchema(names []string) json.RawMessage {
	b, _ := json.Marshal(names)
	return schema(`{
		"to": {"type": "string", "enum": `+string(b)+`, "description": "The agent's name."},
		"task": {"type": "string", "description": "The task, self-contained."}
	}`, "to", "task")
}
