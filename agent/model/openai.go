package model

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// openaiBackend speaks Chat Completions through openai-go, to any
// OpenAI-compatible base URL.
type openaiBackend struct {
	client openai.Client
	model  string
}

// newOpenAI makes p's backend. The SDK's own retries are off (Complete
// retries and fails over), and its environment defaults are overridden:
// the key is p's (none if empty), with no organization or project
// header.
func newOpenAI(p Provider, key string, hc *http.Client) *openaiBackend {
	return &openaiBackend{
		client: openai.NewClient(
			option.WithBaseURL(p.BaseURL),
			option.WithAPIKey(key),
			option.WithHeaderDel("OpenAI-Organization"),
			option.WithHeaderDel("OpenAI-Project"),
			option.WithHTTPClient(hc),
			option.WithMaxRetries(0),
		),
		model: p.Model,
	}
}

func (b *openaiBackend) complete(ctx context.Context, req *Request, onText func(string)) (*Response, error) {
	params, err := b.params(req)
	if err != nil {
		return nil, err
	}
	var cc *openai.ChatCompletion
	if onText == nil {
		cc, err = b.client.Chat.Completions.New(ctx, params)
		if err != nil {
			return nil, openaiError(err)
		}
	} else {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		if cc, err = b.stream(ctx, params, onText); err != nil {
			return nil, err
		}
	}
	return openaiResponse(cc)
}

// stream makes a streaming call, handing the text deltas of the first
// choice to onText and accumulating the chunks into a completion.
func (b *openaiBackend) stream(ctx context.Context, params openai.ChatCompletionNewParams, onText func(string)) (*openai.ChatCompletion, error) {
	s := b.client.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		chunk := s.Current()
		if !acc.AddChunk(chunk) {
			return nil, &protocolError{"stream: a chunk that does not fit the completion"}
		}
		for _, ch := range chunk.Choices {
			if ch.Index == 0 && ch.Delta.Content != "" {
				onText(ch.Delta.Content)
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, openaiError(err)
	}
	// A stream cut short at an event's end (a connection closed without
	// data: [DONE]) ends without error: only a finish_reason says the
	// answer is whole.
	if len(acc.Choices) == 0 || acc.Choices[0].FinishReason == "" {
		return nil, &protocolError{"stream ended before its finish_reason"}
	}
	return &acc.ChatCompletion, nil
}

// params translates req.
func (b *openaiBackend) params(req *Request) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(b.model)}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Text))
		case RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Text))
		case RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(m.Text, m.ToolCallID))
		case RoleAssistant:
			var am openai.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: string(arguments(tc.Arguments)),
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaObject(t.Parameters)
		if err != nil {
			return p, err
		}
		def := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema)}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}
	if req.MaxTokens > 0 {
		// max_tokens, not max_completion_tokens: every OpenAI-compatible
		// server knows it.
		p.MaxTokens = openai.Int(int64(req.MaxTokens))
	}
	return p, nil
}

// openaiResponse translates the first choice of cc.
func openaiResponse(cc *openai.ChatCompletion) (*Response, error) {
	if cc == nil || len(cc.Choices) == 0 {
		return nil, &protocolError{"an answer without a choice"}
	}
	ch := cc.Choices[0]
	msg := Message{Role: RoleAssistant, Text: ch.Message.Content}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue // custom tools are never offered
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{
			ID:        tc.ID,
			Name:      tc.Function.Name,
			Arguments: rawArguments(tc.Function.Arguments),
		})
	}
	if msg.Text == "" && ch.Message.Refusal != "" {
		msg.Text = ch.Message.Refusal
	}
	stop := ch.FinishReason
	switch {
	case len(msg.ToolCalls) > 0:
		stop = "tool_calls"
	case stop == "stop" || stop == "":
		stop = "end"
	case stop == "length":
		stop = "max_tokens"
	}
	return &Response{
		Message: msg,
		Usage: Usage{
			InputTokens:  cc.Usage.PromptTokens,
			OutputTokens: cc.Usage.CompletionTokens,
		},
		StopReason: stop,
	}, nil
}

// openaiError turns the SDK's HTTP error into a statusError (the SDK's
// own text is not kept).
func openaiError(err error) error {
	var ae *openai.Error
	if errors.As(err, &ae) {
		se := &statusError{Status: ae.StatusCode, Message: ae.Message}
		if ae.Response != nil {
			se.Header = ae.Response.Header
			if se.Status == 0 {
				se.Status = ae.Response.StatusCode
			}
		}
		if se.Message == "" {
			se.Message = errorMessage(ae.RawJSON())
		}
		return se
	}
	return err
}

// errorMessage digs the message out of an API error body: error.message
// or message.
func errorMessage(raw string) string {
	var body struct {
		Message string `json:"message"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &body) != nil {
		return ""
	}
	if body.Error != nil && body.Error.Message != "" {
		return body.Error.Message
	}
	return body.Message
}
