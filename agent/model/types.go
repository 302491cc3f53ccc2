package model

import "encoding/json"

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool" // a tool's result, answering ToolCallID
)

// Message is one message of a conversation, in a form both provider kinds
// are translated from and to.
type Message struct {
	Role string `json:"role"`
	// Text is the message's text (a tool result's content for RoleTool).
	Text string `json:"text,omitempty"`
	// ToolCalls are the tools an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a RoleTool message answers; IsError marks a
	// tool error (a refusal, a failure) for providers that have the notion.
	ToolCallID string `json:"tool_call_id,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
}

// ToolCall is one call of a tool asked for by the model.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Tool is a tool offered to the model: its name, what it does and the
// JSON schema of its arguments.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one model call.
type Request struct {
	// Alias names the model: providers whose model or aliases match serve
	// it.
	Alias string
	// Tags every provider that serves the request must carry (a request
	// tagged green-tea reaches only providers tagged green-tea).
	Tags     []string
	System   string
	Messages []Message
	Tools    []Tool
	// MaxTokens bounds the answer (0: the provider's default; the
	// Anthropic kind needs one and uses 4096).
	MaxTokens int
	// OnText, when set, streams: it gets the answer's text as it comes.
	OnText func(delta string)
	// OnAttempt, when set, is told of every attempt of this request
	// (each provider tried, each retry), as the client's observer is:
	// the caller can report the failed ones the answer hides.
	OnAttempt func(Attempt)
}

// Usage is what one call cost.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Response is the model's answer: an assistant message (text and/or tool
// calls), its usage and who answered.
type Response struct {
	Message  Message
	Usage    Usage
	Provider string // the provider's name
	Model    string // the provider's model
	// StopReason is the provider's, normalized: "end", "tool_calls",
	// "max_tokens".
	StopReason string
}
