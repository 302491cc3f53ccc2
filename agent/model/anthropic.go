package model

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// DefaultAnthropicMaxTokens is the max_tokens of an anthropic request
// that gives none (the Messages API needs one).
const DefaultAnthropicMaxTokens = 4096

// anthropicBackend speaks the Messages API through anthropic-sdk-go.
type anthropicBackend struct {
	client anthropic.Client
	model  string
}

// newAnthropic makes p's backend: no environment defaults (no key, base
// URL or profile but p's), no SDK retries (Complete retries and fails
// over), no OpenTelemetry spans.
func newAnthropic(p Provider, key string, hc *http.Client) *anthropicBackend {
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(p.BaseURL),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return &anthropicBackend{client: anthropic.NewClient(opts...), model: p.Model}
}

func (b *anthropicBackend) complete(ctx context.Context, req *Request, onText func(string)) (*Response, error) {
	params, err := b.params(req)
	if err != nil {
		return nil, err
	}
	var msg *anthropic.Message
	if onText == nil {
		msg, err = b.client.Messages.New(ctx, params)
		if err != nil {
			return nil, anthropicError(err)
		}
	} else if msg, err = b.stream(ctx, params, onText); err != nil {
		return nil, err
	}
	return anthropicResponse(msg), nil
}

// stream makes a streaming call, handing the text deltas to onText and
// accumulating the events into a message.
func (b *anthropicBackend) stream(ctx context.Context, params anthropic.MessageNewParams, onText func(string)) (*anthropic.Message, error) {
	s := b.client.Messages.NewStreaming(ctx, params)
	defer s.Close()
	var msg anthropic.Message
	stopped := false
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, &protocolError{"stream: " + err.Error()}
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onText(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		return nil, anthropicError(err)
	}
	if !stopped {
		return nil, &protocolError{"stream ended before message_stop"}
	}
	return &msg, nil
}

// params translates req: system messages join the system prompt, tool
// results become tool_result blocks of a user message (consecutive ones
// in one message, as the API wants them), empty text blocks are left out.
func (b *anthropicBackend) params(req *Request) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(b.model),
		MaxTokens: DefaultAnthropicMaxTokens,
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = append(p.System, anthropic.TextBlockParam{Text: req.System})
	}
	add := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == role {
			p.Messages[n-1].Content = append(p.Messages[n-1].Content, blocks...)
			return
		}
		p.Messages = append(p.Messages, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			if m.Text != "" {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Text})
			}
		case RoleUser:
			if m.Text != "" {
				add(anthropic.MessageParamRoleUser, anthropic.NewTextBlock(m.Text))
			}
		case RoleTool:
			tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.IsError {
				tr.IsError = anthropic.Bool(true)
			}
			if m.Text != "" {
				tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Text}}}
			}
			add(anthropic.MessageParamRoleUser, anthropic.ContentBlockParamUnion{OfToolResult: &tr})
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, objectArguments(tc.Arguments), tc.Name))
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Parameters)
		if err != nil {
			return p, err
		}
		in := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range schema {
			switch k {
			case "type":
				// Always "object", set by the SDK.
			case "properties":
				in.Properties = v
			case "required":
				if names, ok := v.([]any); ok {
					for _, r := range names {
						if s, ok := r.(string); ok {
							in.Required = append(in.Required, s)
						}
					}
				}
			default:
				in.ExtraFields[k] = v
			}
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// anthropicResponse translates msg: its text blocks joined, its tool_use
// blocks as tool calls. Input tokens count the cache's too.
func anthropicResponse(msg *anthropic.Message) *Response {
	out := Message{Role: RoleAssistant}
	var text strings.Builder
	for _, c := range msg.Content {
		switch c.Type {
		case "text":
			text.WriteString(c.Text)
		case "tool_use":
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: rawArguments(string(c.Input))})
		}
	}
	out.Text = text.String()
	stop := string(msg.StopReason)
	switch msg.StopReason {
	case anthropic.StopReasonEndTurn, anthropic.StopReasonStopSequence, "":
		stop = "end"
	case anthropic.StopReasonToolUse:
		stop = "tool_calls"
	case anthropic.StopReasonMaxTokens:
		stop = "max_tokens"
	}
	if len(out.ToolCalls) > 0 {
		stop = "tool_calls"
	}
	u := msg.Usage
	return &Response{
		Message: out,
		Usage: Usage{
			InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
			OutputTokens: u.OutputTokens,
		},
		StopReason: stop,
	}
}

// anthropicError turns the SDK's HTTP error into a statusError (the
// SDK's own text, which holds the URL and the body, is not kept).
func anthropicError(err error) error {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		se := &statusError{Status: ae.StatusCode, Message: errorMessage(ae.RawJSON())}
		if ae.Response != nil {
			se.Header = ae.Response.Header
			if se.Status == 0 {
				se.Status = ae.Response.StatusCode
			}
		}
		return se
	}
	return err
}

// objectArguments is a tool call's input as the Messages API takes it
// back: a JSON object, "{}" for anything else (a model's unparsable
// arguments, already answered with a tool error, must not make every
// later call of the conversation fail).
func objectArguments(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return json.RawMessage("{}")
	}
	return raw
}
