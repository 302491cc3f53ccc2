package modeltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/agent/model"
)

// NewAnthropic starts a fake Anthropic Messages server (POST /v1/messages)
// replaying script. A streamed answer is the API's events: message_start,
// then per content block content_block_start, content_block_delta
// (text_delta pieces, or input_json_delta halves of a tool_use's input)
// and content_block_stop, then message_delta (stop_reason, usage) and
// message_stop.
func NewAnthropic(t testing.TB, script ...Turn) *Server {
	s := newServer(t, "anthropic", "", script)
	s.decode = decodeAnthropic
	s.answer = answerAnthropic
	s.fail = failAnthropic
	return s
}

type antRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	Stream bool `json:"stream"`
}

type antBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func decodeAnthropic(r *http.Request, body []byte) (Received, error) {
	if r.URL.Path != "/v1/messages" {
		return Received{}, fmt.Errorf("path %s: want /v1/messages", r.URL.Path)
	}
	var in antRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return Received{}, fmt.Errorf("body: %w", err)
	}
	if in.MaxTokens <= 0 {
		return Received{}, errors.New("max_tokens missing (the API requires it)")
	}
	rc := Received{
		Path: r.URL.Path, Model: in.Model, Stream: in.Stream, MaxTokens: in.MaxTokens,
		Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get("X-Api-Key"),
		Body: body,
	}
	sys, err := antText(in.System)
	if err != nil {
		return rc, fmt.Errorf("system: %w", err)
	}
	rc.System = sys
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return rc, fmt.Errorf("messages[%d]: role %q", i, m.Role)
		}
		var blocks []antBlock
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			blocks = []antBlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return rc, fmt.Errorf("messages[%d]: content: %w", i, err)
		}
		var text strings.Builder
		var calls []model.ToolCall
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text == "" {
					return rc, fmt.Errorf("messages[%d]: empty text block (the API refuses it)", i)
				}
				text.WriteString(b.Text)
			case "tool_use":
				if m.Role != "assistant" {
					return rc, fmt.Errorf("messages[%d]: tool_use in a %s message", i, m.Role)
				}
				calls = append(calls, model.ToolCall{ID: b.ID, Name: b.Name, Arguments: b.Input})
			case "tool_result":
				if m.Role != "user" {
					return rc, fmt.Errorf("messages[%d]: tool_result in a %s message", i, m.Role)
				}
				t, err := antText(b.Content)
				if err != nil {
					return rc, fmt.Errorf("messages[%d]: tool_result: %w", i, err)
				}
				rc.Messages = append(rc.Messages, model.Message{Role: model.RoleTool, Text: t, ToolCallID: b.ToolUseID, IsError: b.IsError})
			default:
				return rc, fmt.Errorf("messages[%d]: block type %q", i, b.Type)
			}
		}
		if text.Len() > 0 || len(calls) > 0 {
			role := model.RoleUser
			if m.Role == "assistant" {
				role = model.RoleAssistant
			}
			rc.Messages = append(rc.Messages, model.Message{Role: role, Text: text.String(), ToolCalls: calls})
		}
	}
	for _, t := range in.Tools {
		rc.Tools = append(rc.Tools, model.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return rc, nil
}

// antText reads a string or a list of text blocks.
func antText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []antBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errors.New("neither a string nor blocks")
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", fmt.Errorf("block of type %q", b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

func failAnthropic(w http.ResponseWriter, status int, msg string) {
	typ := "api_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == 529:
		typ = "overloaded_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

func answerAnthropic(w http.ResponseWriter, n int, req Received, turn Turn) {
	id := fmt.Sprintf("msg_%d", n)
	type block = map[string]any
	var content []block
	if turn.Text != "" {
		content = append(content, block{"type": "text", "text": turn.Text})
	}
	for i, tc := range turn.ToolCalls {
		tid := tc.ID
		if tid == "" {
			tid = fmt.Sprintf("toolu_%d_%d", n, i)
		}
		content = append(content, block{"type": "tool_use", "id": tid, "name": tc.Name, "input": tc.Arguments})
	}
	stop := "end_turn"
	if len(turn.ToolCalls) > 0 {
		stop = "tool_use"
	}
	if turn.StopReason != "" {
		stop = turn.StopReason
	}
	if !req.Stream {
		if content == nil {
			content = []block{}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": turn.Usage.InputTokens, "output_tokens": turn.Usage.OutputTokens},
		})
		return
	}
	startSSE(w)
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": turn.Usage.InputTokens, "output_tokens": 1},
	}})
	for i, b := range content {
		switch b["type"] {
		case "text":
			sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": block{"type": "text", "text": ""}})
			for _, p := range pieces(b["text"].(string), 8) {
				sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": block{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": block{"type": "tool_use", "id": b["id"], "name": b["name"], "input": block{}}})
			args := string(b["input"].(json.RawMessage))
			half := len(args) / 2
			for half < len(args) && args[half]&0xC0 == 0x80 {
				half++
			}
			for _, part := range []string{args[:half], args[half:]} {
				sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": block{"type": "input_json_delta", "partial_json": part}})
			}
		}
		sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": turn.Usage.OutputTokens}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}
