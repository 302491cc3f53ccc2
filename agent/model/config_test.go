package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/agent/model"
)

func TestValidate(t *testing.T) {
	ok := model.Provider{Name: "p", Kind: model.KindOpenAI, BaseURL: "http://127.0.0.1:11434/v1", Model: "llama3"}
	if err := (model.Config{Providers: []model.Provider{ok}}).Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*model.Provider)
		want string
	}{
		{"name", func(p *model.Provider) { p.Name = "a b" }, "name"},
		{"kind", func(p *model.Provider) { p.Kind = "gemini" }, "kind"},
		{"scheme", func(p *model.Provider) { p.BaseURL = "ftp://x" }, "http or https"},
		{"no host", func(p *model.Provider) { p.BaseURL = "http:///v1" }, "no host"},
		{"credentials", func(p *model.Provider) { p.BaseURL = "https://u:pw@x/v1" }, "credentials"},
		{"query", func(p *model.Provider) { p.BaseURL = "https://x/v1?key=1" }, "query"},
		{"model", func(p *model.Provider) { p.Model = "" }, "model"},
		{"alias", func(p *model.Provider) { p.Aliases = []string{"a\nb"} }, "alias"},
		{"alias twice", func(p *model.Provider) { p.Aliases = []string{"llama3"} }, "twice"},
		{"tag", func(p *model.Provider) { p.Tags = []string{"Green Tea"} }, "tag"},
		{"tag twice", func(p *model.Provider) { p.Tags = []string{"local", "local"} }, "twice"},
		{"weight", func(p *model.Provider) { p.Weight = -1 }, "weight"},
		{"max_concurrency", func(p *model.Provider) { p.MaxConcurrency = 1 << 20 }, "max_concurrency"},
	} {
		p := ok
		tc.edit(&p)
		err := (model.Config{Providers: []model.Provider{p}}).Validate()
		if !errors.Is(err, model.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one about %q", tc.name, err, tc.want)
		}
	}
	if err := (model.Config{Providers: []model.Provider{ok, ok}}).Validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate names: %v", err)
	}
	if err := (model.Config{}).Validate(); err == nil {
		t.Error("no providers: no error")
	}
}

func TestDefaults(t *testing.T) {
	c, err := model.New(model.Config{Providers: []model.Provider{{Name: "p", Kind: model.KindAnthropic, BaseURL: "https://api.anthropic.com", Model: "m"}}})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Providers()[0]
	if st.Weight != model.DefaultWeight || st.MaxConcurrency != model.DefaultMaxConcurrency {
		t.Errorf("stats = %+v", st)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	const secret = "sk-file-secret"
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(secret+"\r\n"), 0o600)
	if k, err := model.ReadKeyFile(good); err != nil || k != secret {
		t.Errorf("ReadKeyFile = %q, %v", k, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, model.MaxKeyFileSize+1), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	ctl := filepath.Join(dir, "ctl")
	os.WriteFile(ctl, []byte(secret+"\x00x"), 0o600)
	for _, p := range []string{link, big, empty, ctl, dir, filepath.Join(dir, "missing")} {
		_, err := model.New(model.Config{Providers: []model.Provider{{Name: "prov-x", Kind: model.KindOpenAI, BaseURL: "http://h/v1", Model: "m", APIKeyFile: p}}})
		if err == nil {
			t.Errorf("%s: no error", p)
			continue
		}
		if !strings.Contains(err.Error(), `"prov-x"`) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q should name the provider, never the key", p, err)
		}
	}
	// The daemon's own key function.
	called := 0
	_, err := model.New(model.Config{Providers: []model.Provider{{Name: "p", Kind: model.KindOpenAI, BaseURL: "http://h/v1", Model: "m", APIKeyFile: "/nonexistent"}}},
		model.WithKeyFunc(func(p model.Provider) (string, error) { called++; return "k", nil }))
	if err != nil || called != 1 {
		t.Errorf("WithKeyFunc: %v, called %d", err, called)
	}
}

func TestBadRequest(t *testing.T) {
	c, err := model.New(model.Config{Providers: []model.Provider{{Name: "p", Kind: model.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1", Model: "m"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []model.Request{
		{Alias: "m", Messages: []model.Message{{Role: "wizard"}}},
		{Alias: "m", Messages: []model.Message{{Role: model.RoleTool, Text: "x"}}},
		{Alias: "m", Tools: []model.Tool{{Name: "t", Parameters: []byte(`[1]`)}}},
		{Alias: "m", Messages: []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "1", Name: "t", Arguments: []byte("{")}}}}},
	} {
		if _, err := c.Complete(t.Context(), req); !errors.Is(err, model.ErrInvalidRequest) {
			t.Errorf("%+v: err = %v", req, err)
		}
	}
}
