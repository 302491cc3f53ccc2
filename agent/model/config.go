package model

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// Kinds of Provider.
const (
	// KindOpenAI is any OpenAI-compatible Chat Completions endpoint
	// (OpenAI, Ollama, llama.cpp server, vLLM…).
	KindOpenAI = "openai"
	// KindAnthropic is Anthropic's Messages API.
	KindAnthropic = "anthropic"
)

// Defaults and bounds of a Provider's numbers.
const (
	DefaultWeight         = 1
	DefaultMaxConcurrency = 4
	MaxWeight             = 1000
	MaxMaxConcurrency     = 4096
)

// Provider is one model endpoint the client may call.
type Provider struct {
	// Name identifies the provider in errors, metrics and audit; unique.
	Name string `yaml:"name" json:"name"`
	// Kind is KindOpenAI or KindAnthropic.
	Kind string `yaml:"kind" json:"kind"`
	// BaseURL is the API's root: for openai up to and including the
	// version (e.g. http://127.0.0.1:11434/v1), for anthropic the host
	// (e.g. https://api.anthropic.com). http or https, no credentials,
	// query or fragment.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// Model is the provider's model name; requests naming it (or one of
	// Aliases) may be served here.
	Model string `yaml:"model" json:"model"`
	// Aliases are further names requests may use for this model.
	Aliases []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	// Tags are what the provider is (e.g. local, green-tea): a request
	// reaches only providers carrying every tag it names.
	Tags []string `yaml:"tags,omitempty" json:"tags,omitempty"`
	// APIKeyFile is a file holding the API key (a regular file of at most
	// 64 KiB, read once by New; a trailing newline is trimmed). Empty: no
	// key (a local server).
	APIKeyFile string `yaml:"api_key_file,omitempty" json:"api_key_file,omitempty"`
	// MaxConcurrency bounds the calls in flight to the provider (0:
	// DefaultMaxConcurrency).
	MaxConcurrency int `yaml:"max_concurrency,omitempty" json:"max_concurrency,omitempty"`
	// Weight is the provider's share of the load among those eligible
	// for a request (0: DefaultWeight).
	Weight int `yaml:"weight,omitempty" json:"weight,omitempty"`
}

// Config is the client's providers.
type Config struct {
	Providers []Provider `yaml:"providers" json:"providers"`
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("invalid model providers")

// Validate checks c: at least one provider, unique names, known kinds,
// http(s) base URLs without credentials, a model, sane aliases and tags,
// and weight and max_concurrency (zero takes the default) within bounds.
// Its errors wrap ErrInvalidConfig and name the provider.
func (c Config) Validate() error {
	if len(c.Providers) == 0 {
		return fmt.Errorf("%w: no providers", ErrInvalidConfig)
	}
	names := make(map[string]bool, len(c.Providers))
	for i, p := range c.Providers {
		if err := p.validate(); err != nil {
			if p.Name == "" || !validName(p.Name) {
				return fmt.Errorf("%w: providers[%d]: %v", ErrInvalidConfig, i, err)
			}
			return fmt.Errorf("%w: provider %q: %v", ErrInvalidConfig, p.Name, err)
		}
		if names[p.Name] {
			return fmt.Errorf("%w: provider %q: name used twice", ErrInvalidConfig, p.Name)
		}
		names[p.Name] = true
	}
	return nil
}

// validate checks one provider; its errors do not name it.
func (p Provider) validate() error {
	if !validName(p.Name) {
		return fmt.Errorf("name %q: want 1 to 64 of [A-Za-z0-9._-], starting with a letter or digit", p.Name)
	}
	switch p.Kind {
	case KindOpenAI, KindAnthropic:
	default:
		return fmt.Errorf("kind %q: want %s or %s", p.Kind, KindOpenAI, KindAnthropic)
	}
	if err := checkBaseURL(p.BaseURL); err != nil {
		return err
	}
	if !validWord(p.Model, 256) {
		return fmt.Errorf("model %q: want 1 to 256 printable characters without spaces", p.Model)
	}
	seen := map[string]bool{p.Model: true}
	for _, a := range p.Aliases {
		if !validWord(a, 256) {
			return fmt.Errorf("alias %q: want 1 to 256 printable characters without spaces", a)
		}
		if seen[a] {
			return fmt.Errorf("alias %q: given twice (or equal to the model)", a)
		}
		seen[a] = true
	}
	tags := map[string]bool{}
	for _, t := range p.Tags {
		if !validTag(t) {
			return fmt.Errorf("tag %q: want 1 to 64 of [a-z0-9._-], starting with a letter or digit", t)
		}
		if tags[t] {
			return fmt.Errorf("tag %q: given twice", t)
		}
		tags[t] = true
	}
	if p.APIKeyFile != "" && strings.ContainsFunc(p.APIKeyFile, unicode.IsControl) {
		return errors.New("api_key_file: control characters in the path")
	}
	if p.Weight < 0 || p.Weight > MaxWeight {
		return fmt.Errorf("weight %d: want 1 to %d (0: %d)", p.Weight, MaxWeight, DefaultWeight)
	}
	if p.MaxConcurrency < 0 || p.MaxConcurrency > MaxMaxConcurrency {
		return fmt.Errorf("max_concurrency %d: want 1 to %d (0: %d)", p.MaxConcurrency, MaxMaxConcurrency, DefaultMaxConcurrency)
	}
	return nil
}

// withDefaults returns p with its zero numbers set to the defaults and its
// slices copied.
func (p Provider) withDefaults() Provider {
	if p.Weight == 0 {
		p.Weight = DefaultWeight
	}
	if p.MaxConcurrency == 0 {
		p.MaxConcurrency = DefaultMaxConcurrency
	}
	p.Aliases = append([]string(nil), p.Aliases...)
	p.Tags = append([]string(nil), p.Tags...)
	return p
}

// serves says whether p answers alias: its model or one of its aliases.
func (p *Provider) serves(alias string) bool {
	if alias == "" {
		return false
	}
	if p.Model == alias {
		return true
	}
	for _, a := range p.Aliases {
		if a == alias {
			return true
		}
	}
	return false
}

// carries says whether p has every tag of tags.
func (p *Provider) carries(tags []string) bool {
	for _, want := range tags {
		found := false
		for _, t := range p.Tags {
			if t == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || s == "" {
		return fmt.Errorf("base_url %q: not a URL", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("base_url %q: want an http or https URL", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("base_url %q: no host", s)
	}
	if u.User != nil {
		return errors.New("base_url: credentials in the URL (use api_key_file)")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return fmt.Errorf("base_url %q: no query or fragment allowed", s)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case (r == '.' || r == '_' || r == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validTag(s string) bool {
	return validName(s) && strings.ToLower(s) == s
}

func validWord(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
