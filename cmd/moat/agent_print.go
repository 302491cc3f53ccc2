package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/display"
)

// Every string of an agent run (the model's text, a tool's arguments and
// result, an error, the answer, even the agents' names, which the
// document chose) may have been chosen by a model, a sandbox or whoever
// wrote the document: it goes through package display, escaped and cut,
// before it reaches a terminal.

// maxTextLines is how many lines of a model's text a block shows.
const maxTextLines = 40

// answerLineMax caps each line of the final answer on stdout (larger than
// an event line's cap: the answer is what the command is for).
const answerLineMax = display.PromptMax

// agentPrinter writes an agent run's events as lines, for a person.
type agentPrinter struct {
	w io.Writer
	// times starts each event's first line with its time (moat agent logs).
	times bool
}

// event writes ev: a line or, for the model's text, a header and the
// text's lines indented. model.request and run.started, which say
// nothing a person needs, are not shown.
func (p *agentPrinter) event(ev api.AgentEvent) {
	d := display.String
	who := "[agent] "
	if ev.Agent != "" {
		who = "[" + d(ev.Agent) + "] "
	}
	var line string
	var block string
	switch ev.Type {
	case api.AgentEvModelRequest, api.AgentEvRunStarted:
		return
	case api.AgentEvMessage:
		line, block = "task:", ev.Text
	case api.AgentEvModelResponse:
		line, block = "model: "+providerModel(ev)+usageWords(ev.Usage), ev.Text
	case api.AgentEvModelError:
		line = "model error: " + providerModel(ev) + ": " + d(ev.Text)
	case api.AgentEvToolCall:
		line = toolCallWords(ev.Tool)
	case api.AgentEvToolResult:
		line = "→ " + toolResultWords(ev.Tool)
	case api.AgentEvHandoff:
		to, task := handoffArgs(ev.Tool)
		line, block = "handoff to "+d(to)+":", task
	case api.AgentEvHandoffResult:
		to, _ := handoffArgs(ev.Tool)
		answer := ""
		if ev.Tool != nil {
			answer = ev.Tool.Result
			if ev.Tool.Error != "" {
				answer = ev.Tool.Error
			}
		}
		line = "← " + d(to) + " answered (" + countLines(answer) + ")"
		if ev.Tool != nil && ev.Tool.Error != "" {
			line = "← " + d(to) + " failed: " + d(ev.Tool.Error)
		}
	case api.AgentEvRunSucceeded:
		line = "run succeeded"
	case api.AgentEvRunFailed:
		line = "run failed: " + d(ev.Text)
	case api.AgentEvRunCancelled:
		line = "run cancelled" + colonText(ev.Text)
	case api.AgentEvRunInterrupted:
		line = "run interrupted" + colonText(ev.Text) + " (it goes on when the daemon starts again)"
	case api.AgentEvRunResumed:
		line = "run resumed" + colonText(ev.Text)
	default:
		line = d(ev.Type) + colonText(ev.Text)
	}
	if p.times {
		who = ev.Time.Local().Format(time.TimeOnly) + " " + who
	}
	fmt.Fprintln(p.w, who+line)
	if block != "" {
		writeBlock(p.w, "  ", block, display.DefaultMax, maxTextLines)
	}
}

// colonText is ": TEXT" escaped, or "" for no text.
func colonText(s string) string {
	if s == "" {
		return ""
	}
	return ": " + display.String(s)
}

// providerModel is "provider/model" of a model event ("?" for a part the
// event lacks).
func providerModel(ev api.AgentEvent) string {
	p, m := ev.Provider, ev.Model
	if p == "" {
		p = "?"
	}
	if m == "" {
		m = "?"
	}
	return display.String(p) + "/" + display.String(m)
}

// usageWords is ", IN→OUT tokens" ("" without usage).
func usageWords(u *api.AgentUsage) string {
	if u == nil {
		return ""
	}
	return fmt.Sprintf(", %d→%d tokens", u.InputTokens, u.OutputTokens)
}

// toolCallWords is `tool NAME {ARGS} DECISION (rule R)`.
func toolCallWords(tc *api.AgentToolCall) string {
	if tc == nil {
		return "tool ?"
	}
	s := "tool " + display.String(tc.Name)
	if len(tc.Arguments) > 0 {
		s += " " + display.String(compactJSON(tc.Arguments))
	}
	if tc.Decision != "" {
		s += " " + display.String(tc.Decision)
	}
	if tc.Rule != "" {
		s += " (rule " + display.String(tc.Rule) + ")"
	}
	return s
}

// compactJSON is j on one line (j as it is when it is not JSON), with
// the HTML escapes encoding/json writes (\u003c, \u003e, \u0026) shown
// as the characters they are: "a > b", not "a \u003e b".
func compactJSON(j json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, j); err != nil {
		return string(j)
	}
	return unescapeHTML(b.String())
}

// unescapeHTML replaces the escapes \u003c, \u003e and \u0026 of JSON
// text s by <, > and &, leaving every other escape (an escaped backslash
// followed by "u003c" included) as it is.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if i+5 < len(s) && s[i+1] == 'u' {
			switch s[i+2 : i+6] {
			case "003c", "003C":
				b.WriteByte('<')
				i += 5
				continue
			case "003e", "003E":
				b.WriteByte('>')
				i += 5
				continue
			case "0026":
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		// Any other escape: keep it whole (its second byte too, so that
		// an escaped backslash is not taken for the start of another).
		b.WriteString(s[i : i+2])
		i++
	}
	return b.String()
}

// toolResultWords sums up a tool's result, after the policy's decision
// when the result carries it: "allow, exit 0, 12 lines", "12 lines",
// "refused (rule R): WHY" (the policy's or an approver's no), "error:
// WHY" (a bad argument, a failed call).
func toolResultWords(tc *api.AgentToolCall) string {
	if tc == nil {
		return "no result"
	}
	if tc.Error != "" {
		s := "error: "
		if tc.Decision == api.DecisionDeny {
			s = "refused: "
			if tc.Rule != "" {
				s = "refused (rule " + display.String(tc.Rule) + "): "
			}
		}
		s += display.String(tc.Error)
		if tc.ExitCode != nil {
			s += " (exit " + strconv.Itoa(*tc.ExitCode) + ")"
		}
		return s
	}
	s := countLines(tc.Result)
	if tc.ExitCode != nil {
		s = "exit " + strconv.Itoa(*tc.ExitCode) + ", " + s
	}
	if tc.Decision != "" {
		s = display.String(tc.Decision) + ", " + s
	}
	return s
}

// countLines is "N lines" of s ("1 line", "no output").
func countLines(s string) string {
	if s == "" {
		return "no output"
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	if n == 1 {
		return "1 line"
	}
	return strconv.Itoa(n) + " lines"
}

// handoffArgs are the to and task of a handoff tool call.
func handoffArgs(tc *api.AgentToolCall) (to, task string) {
	if tc == nil {
		return "?", ""
	}
	var a struct {
		To   string `json:"to"`
		Task string `json:"task"`
	}
	if json.Unmarshal(tc.Arguments, &a) != nil || a.To == "" {
		return "?", string(tc.Arguments)
	}
	return a.To, a.Task
}

// writeBlock writes text's lines, each under indent, escaped and cut at
// lineMax bytes; past maxLines lines (0: no limit) it says how many
// more there are.
func writeBlock(w io.Writer, indent, text string, lineMax, maxLines int) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, l := range lines {
		if maxLines > 0 && i == maxLines {
			fmt.Fprintf(w, "%s… (%d more lines)\n", indent, len(lines)-i)
			return
		}
		fmt.Fprintln(w, indent+display.StringN(l, lineMax))
	}
}

// printAgentEnd writes the end of a run: asJSON, the run on one line on
// out; otherwise the answer of a succeeded run on out and a summary (or
// why it did not succeed) on errw.
func printAgentEnd(out, errw io.Writer, run *api.AgentRun, asJSON bool) error {
	if asJSON {
		return printJSONLine(out, run)
	}
	id := display.String(run.ID)
	if run.State != api.AgentSucceeded {
		line := "moat: agent run " + id + " " + display.String(run.State)
		if run.Error != "" {
			line += ": " + display.String(run.Error)
		}
		fmt.Fprintln(errw, line)
		return nil
	}
	fmt.Fprintf(errw, "moat: agent run %s succeeded: %d turns, %d→%d tokens\n", id, run.Turns, run.Usage.InputTokens, run.Usage.OutputTokens)
	if run.Answer == "" {
		return nil
	}
	writeBlock(out, "", run.Answer, answerLineMax, 0)
	return nil
}
