package model_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/agent/model"
)

// TestOpenAIStreamCutShort: an OpenAI-compatible stream that ends at an
// event's end without a finish_reason or data: [DONE] (a connection
// closed midway) is a broken stream, never a whole answer.
func TestOpenAIStreamCutShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"},"finish_reason":null}]}`+"\n\n")
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, []model.Provider{{Name: "cut", Kind: model.KindOpenAI, BaseURL: srv.URL + "/v1", Model: "m"}},
		model.WithRetry(1, time.Millisecond, time.Millisecond))
	var got string
	resp, err := c.Complete(context.Background(), model.Request{
		Alias: "m", Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}},
		OnText: func(s string) { got += s },
	})
	var pe *model.ProviderError
	if err == nil || !errors.As(err, &pe) || pe.Class != model.ClassProtocol {
		t.Fatalf("Complete of a stream cut short: %+v, %v; want a protocol error", resp, err)
	}
	if got != "par" {
		t.Errorf("streamed %q, want the text that came", got)
	}
}
