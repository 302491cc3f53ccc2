package modeltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
)

// NewOpenAI starts a fake OpenAI-compatible Chat Completions server
// (POST …/chat/completions) replaying script. A streamed answer is
// data: lines of chat.completion.chunk objects (the role, the text in
// pieces, each tool call's name then its arguments in two pieces, the
// finish_reason, the usage when stream_options.include_usage asks for
// it) and data: [DONE].
func NewOpenAI(t testing.TB, script ...Turn) *Server {
	s := newServer(t, "openai", "/v1", script)
	s.decode = decodeOpenAI
	s.answer = answerOpenAI
	s.fail = failOpenAI
	return s
}

type oaiRequest struct {
	Model               string       `json:"model"`
	Messages            []oaiMessage `json:"messages"`
	Tools               []oaiTool    `json:"tools"`
	Stream              bool         `json:"stream"`
	MaxTokens           int          `json:"max_tokens"`
	MaxCompletionTokens int          `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type oaiMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []oaiToolCall   `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type oaiToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaiTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

func decodeOpenAI(r *http.Request, body []byte) (Received, error) {
	if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		return Received{}, fmt.Errorf("path %s: want …/chat/completions", r.URL.Path)
	}
	var in oaiRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Received{}, fmt.Errorf("body: %w", err)
	}
	rc := Received{
		Path: r.URL.Path, Model: in.Model, Stream: in.Stream,
		MaxTokens:     max(in.MaxTokens, in.MaxCompletionTokens),
		IncludeUsage:  in.StreamOptions != nil && in.StreamOptions.IncludeUsage,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get("X-Api-Key"),
		Body: body,
	}
	var system []string
	for i, m := range in.Messages {
		text, err := oaiText(m.Content)
		if err != nil {
			return rc, fmt.Errorf("messages[%d]: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user":
			rc.Messages = append(rc.Messages, model.Message{Role: model.RoleUser, Text: text})
		case "tool":
			rc.Messages = append(rc.Messages, model.Message{Role: model.RoleTool, Text: text, ToolCallID: m.ToolCallID})
		case "assistant":
			msg := model.Message{Role: model.RoleAssistant, Text: text}
			for _, tc := range m.ToolCalls {
				if tc.Type != "function" {
					return rc, fmt.Errorf("messages[%d]: tool call type %q", i, tc.Type)
				}
				msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
			}
			rc.Messages = append(rc.Messages, msg)
		default:
			return rc, fmt.Errorf("messages[%d]: role %q", i, m.Role)
		}
	}
	rc.System = strings.Join(system, "\n")
	for _, t := range in.Tools {
		if t.Type != "function" {
			return rc, fmt.Errorf("tool type %q", t.Type)
		}
		rc.Tools = append(rc.Tools, model.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return rc, nil
}

// oaiText reads a message's content: null, a string or text parts.
func oaiText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content neither a string nor parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part of type %q", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func failOpenAI(w http.ResponseWriter, status int, msg string) {
	typ := "server_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status < 500:
		typ = "invalid_request_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

func answerOpenAI(w http.ResponseWriter, n int, req Received, turn Turn) {
	id := fmt.Sprintf("chatcmpl-%d", n)
	created := time.Now().Unix()
	calls := make([]oaiToolCall, len(turn.ToolCalls))
	for i, tc := range turn.ToolCalls {
		calls[i].ID = tc.ID
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%d_%d", n, i)
		}
		calls[i].Type = "function"
		calls[i].Function.Name = tc.Name
		calls[i].Function.Arguments = string(tc.Arguments)
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if turn.StopReason != "" {
		finish = turn.StopReason
	}
	usage := map[string]any{
		"prompt_tokens":     turn.Usage.InputTokens,
		"completion_tokens": turn.Usage.OutputTokens,
		"total_tokens":      turn.Usage.InputTokens + turn.Usage.OutputTokens,
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if turn.Text != "" {
			msg["content"] = turn.Text
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}
	startSSE(w)
	chunk := func(delta map[string]any, finish any) {
		sse(w, "", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, p := range pieces(turn.Text, 8) {
		chunk(map[string]any{"content": p}, nil)
	}
	for i, tc := range calls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": tc.ID, "type": "function",
			"function": map[string]any{"name": tc.Function.Name, "arguments": ""},
		}}}, nil)
		args := tc.Function.Arguments
		half := len(args) / 2
		for half < len(args) && args[half]&0xC0 == 0x80 {
			half++
		}
		for _, part := range []string{args[:half], args[half:]} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": part},
			}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if req.IncludeUsage {
		sse(w, "", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{}, "usage": usage,
		})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
