package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/moat-sandbox/moat/agent"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/display"
	"github.com/moat-sandbox/moat/sandbox"
)

// agentsFile is the agents file of `moat agent run`, checked here.
type agentsFile struct {
	// path is the file as given ("-": standard input).
	path string
	// text is the document as read.
	text string
	// providers is whether it has a providers section.
	providers bool
	// withoutProviders is text without its providers section: what a
	// daemon with providers of its own is sent.
	withoutProviders string
}

// loadAgentsFile reads the agents file of `moat agent sub` at path
// ("-": sio.stdin) and
// checks it as the daemon will (agent.Compile) and, unless name is "",
// that it has agent name; an invalid file is exit 125 with the line at
// fault.
func loadAgentsFile(sub, path, name string, sio sandboxIO) (*agentsFile, error) {
	text, err := readDocument(path, sio.stdin)
	if err != nil {
		return nil, err
	}
	shown := path
	if path == "-" {
		shown = "<stdin>"
	}
	doc, err := agent.Compile([]byte(text))
	if err != nil {
		fmt.Fprintf(sio.stderr, "moat agent %s: %s: %s\n", sub, display.String(shown), display.String(err.Error()))
		return nil, &exitError{code: sandbox.ExitSetupFailed}
	}
	if name != "" && doc.Agent(name) == nil {
		return nil, usageError("%s has no agent %q", shown, name)
	}
	f := &agentsFile{path: path, text: text, providers: len(doc.Providers.Providers) > 0, withoutProviders: text}
	if f.providers {
		if f.withoutProviders, err = stripProviders([]byte(text)); err != nil {
			return nil, fmt.Errorf("%s: removing its providers section: %w", shown, err)
		}
	}
	return f, nil
}

// forTarget is the document to send to the daemon of t: a private
// daemon's providers are this file's (it was started with --models
// FILE), so it gets the file as it is; a daemon's providers are its own,
// so it gets the file without its providers section, and a note on
// stderr says so.
func (f *agentsFile) forTarget(t target, sio sandboxIO) string {
	if t.local || !f.providers {
		return f.text
	}
	fmt.Fprintln(sio.stderr, "moat: the daemon's own model providers serve this run: the file's providers section is not sent")
	return f.withoutProviders
}

// stripProviders returns the YAML (or JSON) document doc without its
// top-level providers key, as YAML.
func stripProviders(doc []byte) (string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return "", err
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return "", errors.New("the document is not a mapping")
	}
	m := root.Content[0]
	kept := m.Content[:0:0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "providers" {
			continue
		}
		kept = append(kept, m.Content[i], m.Content[i+1])
	}
	m.Content = kept
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// modelsFile is the path a private daemon reads the file's providers
// from (moat serve --models): the file made absolute, or for standard
// input a temporary copy, removed by the returned function.
func (f *agentsFile) modelsFile() (string, func(), error) {
	if f.path != "-" {
		p, err := absHostPath(f.path)
		return p, func() {}, err
	}
	tmp, err := os.CreateTemp("", "moat-agents-*.yaml")
	if err != nil {
		return "", nil, fmt.Errorf("copying the agents file for a private daemon: %w", err)
	}
	done := func() { os.Remove(tmp.Name()) }
	if _, err := tmp.WriteString(f.text); err != nil {
		tmp.Close()
		done()
		return "", nil, fmt.Errorf("copying the agents file for a private daemon: %w", err)
	}
	if err := tmp.Close(); err != nil {
		done()
		return "", nil, fmt.Errorf("copying the agents file for a private daemon: %w", err)
	}
	return tmp.Name(), done, nil
}

// invalidAgentsFile turns the daemon's refusal of the document (an
// invalid_argument, whose message names the line) into exit 125 with that
// message after the file's name; other errors are returned as they are.
func invalidAgentsFile(sio sandboxIO, path string, err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidArgument {
		return err
	}
	if path == "-" {
		path = "<stdin>"
	}
	fmt.Fprintf(sio.stderr, "moat agent run: %s: %s\n", display.String(path), display.String(ae.Message))
	return &exitError{code: sandbox.ExitSetupFailed}
}
