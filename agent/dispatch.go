package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/agent/model"
	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/sandbox"
)

// The tool dispatcher: a tool call's arguments are checked (prepare),
// then it runs as the API calls of its tool in the agent's sandbox, as the
// run's owner (run), and its outcome becomes the text the model gets.
//
// The agent's sandbox config is the ceiling of every call: the sandbox
// was made with its template, limits, network and policy, and nothing a
// model gives adds to them. Arguments can only narrow: a shorter timeout,
// a working directory. Paths are the sandbox's, resolved by its guest.

// toolEnv is where a prepared call runs.
type toolEnv struct {
	b       Backend
	o       Owner
	sandbox string
}

// toolResult is a call's outcome.
type toolResult struct {
	// Text is what the model gets; IsError marks a refusal or failure.
	Text    string
	IsError bool
	// Decision and Rule are the policy's (allow when the call ran, deny
	// with the rule when it was refused).
	Decision string
	Rule     string
	ExitCode *int
	// gone: the call failed because its sandbox is gone (it did not
	// run): the engine may make a new sandbox and run it once more.
	gone bool
}

// prepared is a tool call whose arguments are valid.
type prepared struct {
	name string
	// needsSandbox: run needs the agent's sandbox (every tool but
	// handoff).
	needsSandbox bool
	// retryable: run may be repeated in a new sandbox when the old one
	// is gone (not for the process tools, whose processes died with it).
	retryable bool
	run       func(ctx context.Context, x toolEnv) toolResult
	// handoff is the handoff tool's arguments (the engine runs it).
	handoff *handoffArgs
}

// handoffArgs are handoff's arguments.
type handoffArgs struct {
	To   string `json:"to"`
	Task string `json:"task"`
}

// prepare checks call's arguments for agent a.
func prepare(a *Agent, call model.ToolCall) (*prepared, error) {
	if !a.offers(call.Name) {
		return nil, fmt.Errorf("no tool %q is offered to this agent (%s)", call.Name, strings.Join(a.Tools, ", "))
	}
	p := &prepared{name: call.Name, needsSandbox: true, retryable: !strings.HasPrefix(call.Name, "process_")}
	limit := a.Sandbox.Timeout
	switch call.Name {
	case ToolShellExec:
		var v struct {
			Command  *string `json:"command"`
			Cwd      string  `json:"cwd"`
			TimeoutS *int64  `json:"timeout_s"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		cmd, err := checkCommand(v.Command)
		if err != nil {
			return nil, err
		}
		cwd, err := checkCwd(v.Cwd)
		if err != nil {
			return nil, err
		}
		d, note, err := timeoutOf(limit, v.TimeoutS)
		if err != nil {
			return nil, err
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult { return shellExec(ctx, x, cmd, cwd, d, note) }
	case ToolProcessStart:
		var v struct {
			Command *string `json:"command"`
			Cwd     string  `json:"cwd"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		cmd, err := checkCommand(v.Command)
		if err != nil {
			return nil, err
		}
		cwd, err := checkCwd(v.Cwd)
		if err != nil {
			return nil, err
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult { return processStart(ctx, x, cmd, cwd, limit) }
	case ToolWriteFile:
		var v struct {
			Path    string  `json:"path"`
			Content *string `json:"content"`
			Mode    string  `json:"mode"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		if err := checkPath("path", v.Path); err != nil {
			return nil, err
		}
		if v.Content == nil {
			return nil, bad("content is required")
		}
		if v.Mode != "" && !fileMode.MatchString(v.Mode) {
			return nil, bad("mode %q: want octal permissions such as 0644 or 0755", v.Mode)
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult { return writeFile(ctx, x, v.Path, *v.Content, v.Mode) }
	case ToolReadFile, ToolListDir:
		var v struct {
			Path string `json:"path"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		if err := checkPath("path", v.Path); err != nil {
			return nil, err
		}
		if call.Name == ToolReadFile {
			p.run = func(ctx context.Context, x toolEnv) toolResult { return readFile(ctx, x, v.Path, limit) }
		} else {
			p.run = func(ctx context.Context, x toolEnv) toolResult { return listDir(ctx, x, v.Path) }
		}
	case ToolFetchURL:
		var v struct {
			URL string `json:"url"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		u, err := checkURL(v.URL)
		if err != nil {
			return nil, err
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult { return fetchURL(ctx, x, u) }
	case ToolProcessOutput:
		var v struct {
			Process *uint64 `json:"process"`
			After   uint64  `json:"after"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		if v.Process == nil || *v.Process == 0 {
			return nil, bad("process is required")
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult { return processOutput(ctx, x, *v.Process, v.After) }
	case ToolProcessStdin:
		var v struct {
			Process *uint64 `json:"process"`
			Data    string  `json:"data"`
			EOF     bool    `json:"eof"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		if v.Process == nil || *v.Process == 0 {
			return nil, bad("process is required")
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult {
			return simple(ctx, x, api.OpStdin, api.Stdin{Sandbox: x.sandbox, Process: *v.Process, Data: v.Data, EOF: v.EOF},
				fmt.Sprintf("wrote %d bytes to process %d%s", len(v.Data), *v.Process, map[bool]string{true: " and closed its stdin"}[v.EOF]))
		}
	case ToolProcessSignal:
		var v struct {
			Process *uint64 `json:"process"`
			Signal  string  `json:"signal"`
		}
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		if v.Process == nil || *v.Process == 0 {
			return nil, bad("process is required")
		}
		sig, err := checkSignal(v.Signal)
		if err != nil {
			return nil, err
		}
		p.run = func(ctx context.Context, x toolEnv) toolResult {
			return simple(ctx, x, api.OpSignal, api.Signal{Sandbox: x.sandbox, Process: *v.Process, Signal: sig},
				fmt.Sprintf("sent %s to process %d", sig, *v.Process))
		}
	case ToolHandoff:
		var v handoffArgs
		if err := decodeArgs(call.Arguments, &v); err != nil {
			return nil, err
		}
		switch {
		case v.To == "":
			return nil, bad("to is required")
		case !slices.Contains(a.Handoff, v.To):
			return nil, bad("%q is not an agent this agent may hand tasks to (%s)", v.To, strings.Join(a.Handoff, ", "))
		case strings.TrimSpace(v.Task) == "":
			return nil, bad("task is required")
		case len(v.Task) > maxTask:
			return nil, bad("task is %d bytes: at most %d", len(v.Task), maxTask)
		case strings.IndexByte(v.Task, 0) >= 0:
			return nil, bad("task contains a NUL byte")
		}
		p.needsSandbox, p.retryable, p.handoff = false, false, &v
	default:
		return nil, fmt.Errorf("no tool %q", call.Name)
	}
	return p, nil
}

// callAs makes op and returns its answer as a *T.
func callAs[T any](ctx context.Context, x toolEnv, op string, req any, body io.Reader, out io.Writer) (*T, error) {
	v, err := x.b.Call(ctx, x.o, op, req, body, out)
	if err != nil {
		return nil, err
	}
	switch a := v.(type) {
	case *T:
		if a != nil {
			return a, nil
		}
	case T:
		return &a, nil
	}
	return nil, fmt.Errorf("%s answered %T", op, v)
}

// failed is the result of a call the backend refused or failed.
func failed(err error) toolResult {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return toolResult{Text: "failed: " + err.Error(), IsError: true}
	}
	switch {
	case ae.Code == api.CodePolicyDenied && ae.Approval != "":
		return toolResult{Text: fmt.Sprintf("refused: approval %s was denied or expired: %s", ae.Approval, ae.Message),
			IsError: true, Decision: api.DecisionDeny, Rule: ae.Rule}
	case ae.Code == api.CodePolicyDenied:
		t := "refused by the policy: " + ae.Message
		if ae.Rule != "" {
			t += " (rule " + ae.Rule + ")"
		}
		return toolResult{Text: t, IsError: true, Decision: api.DecisionDeny, Rule: ae.Rule}
	case ae.Code == api.CodeNotRunning || ae.Code == api.CodeGone || ae.Code == api.CodeNotFound:
		return toolResult{Text: "failed: " + ae.Error(), IsError: true, gone: true}
	}
	return toolResult{Text: "failed: " + ae.Error(), IsError: true}
}

// ran is the result of a call that ran.
func ran(text string) toolResult { return toolResult{Text: text, Decision: api.DecisionAllow} }

// sh is the argv of a shell command inside the sandbox.
func sh(cmd string) []string { return []string{"/bin/sh", "-c", cmd} }

// shellExec runs cmd by /bin/sh -c in the sandbox (process.exec).
func shellExec(ctx context.Context, x toolEnv, cmd, cwd string, timeout time.Duration, note string) toolResult {
	res, err := callAs[sandbox.Result](ctx, x, api.OpExec, api.Exec{
		Sandbox: x.sandbox, Args: sh(cmd), Cwd: cwd, TimeoutMs: timeout.Milliseconds(),
		OutputLimit: OutputHead + OutputTail,
	}, nil, nil)
	if err != nil {
		return failed(err)
	}
	r := ran(execText(res, note))
	code := res.ExitCode
	r.ExitCode = &code
	return r
}

// execText is the text of an exec's result: exit code and reason, then
// each stream's head and tail with its size.
func execText(res *sandbox.Result, note string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d (%s)", res.ExitCode, res.ExitReason)
	if res.Error != "" {
		b.WriteString(": " + clipOutput(res.Error))
	}
	if note != "" {
		b.WriteString("\nnote: " + note)
	}
	stream(&b, "stdout", res.Stdout, res.StdoutBytes)
	stream(&b, "stderr", res.Stderr, res.StderrBytes)
	return b.String()
}

// stream writes one stream of output: its size and its clipped text.
func stream(b *strings.Builder, name, s string, total int64) {
	total = max(total, int64(len(s)))
	if total == 0 {
		fmt.Fprintf(b, "\n%s: (empty)", name)
		return
	}
	fmt.Fprintf(b, "\n%s (%d bytes):\n%s", name, total, clipOutput(s))
	if kept := int64(len(s)); kept < total && len(s) <= OutputHead+OutputTail {
		fmt.Fprintf(b, "\n[the sandbox kept %d of its %d bytes: its head and tail]", kept, total)
	}
}

// processStart starts cmd in the background (process.start).
func processStart(ctx context.Context, x toolEnv, cmd, cwd string, limit time.Duration) toolResult {
	p, err := callAs[api.Process](ctx, x, api.OpStart, api.Exec{
		Sandbox: x.sandbox, Args: sh(cmd), Cwd: cwd, TimeoutMs: limit.Milliseconds(),
		OutputLimit: 4 * (OutputHead + OutputTail),
	}, nil, nil)
	if err != nil {
		return failed(err)
	}
	return ran(fmt.Sprintf("started process %d (it is killed after %s); read its output with process_output", p.ID, limit))
}

// processOutput reads a process's output after seq (process.output, not
// following: what there is now).
func processOutput(ctx context.Context, x toolEnv, proc, after uint64) toolResult {
	w := &capWriter{max: 16 << 20}
	p, err := callAs[api.Process](ctx, x, api.OpOutput, api.ReadOutput{Sandbox: x.sandbox, Process: proc, After: after}, nil, w)
	if err != nil {
		return failed(err)
	}
	var out, errs bytes.Buffer
	var lost int64
	next := after
	var res *sandbox.Result
	sc := bufio.NewScanner(bytes.NewReader(w.buf))
	sc.Buffer(nil, len(w.buf)+1)
	for sc.Scan() {
		var ev api.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		next = max(next, ev.Seq)
		switch ev.Type {
		case api.EventStdout:
			out.Write(ev.Output())
		case api.EventStderr:
			errs.Write(ev.Output())
		case api.EventLost:
			lost += ev.LostBytes
		case api.EventExit:
			res = ev.Result
		}
	}
	if res == nil {
		res = p.Result
	}
	var b strings.Builder
	fmt.Fprintf(&b, "process %d: %s", proc, cmpOr(p.State, api.ProcRunning))
	var code *int
	if res != nil {
		fmt.Fprintf(&b, ", exit code %d (%s)", res.ExitCode, res.ExitReason)
		c := res.ExitCode
		code = &c
	}
	fmt.Fprintf(&b, "\nnext: %d (give it as after to read on)", next)
	if lost > 0 {
		fmt.Fprintf(&b, "\n[%d bytes of output were dropped before this]", lost)
	}
	if w.total > int64(len(w.buf)) {
		b.WriteString("\n[the answer was cut: read on with after]")
	}
	stream(&b, "stdout", out.String(), int64(out.Len()))
	stream(&b, "stderr", errs.String(), int64(errs.Len()))
	r := ran(b.String())
	r.ExitCode = code
	return r
}

// cmpOr returns s, or def when s is empty.
func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// simple makes op and answers ok when it succeeds.
func simple(ctx context.Context, x toolEnv, op string, req any, ok string) toolResult {
	if _, err := x.b.Call(ctx, x.o, op, req, nil, nil); err != nil {
		return failed(err)
	}
	return ran(ok)
}

// writeFile writes content at p (file.write, the content as the body).
func writeFile(ctx context.Context, x toolEnv, p, content, mode string) toolResult {
	if mode != "" && len(mode) == 3 {
		mode = "0" + mode
	}
	w, err := callAs[api.Written](ctx, x, api.OpFileWrite, api.WriteFile{Sandbox: x.sandbox, Path: p, Mode: mode},
		strings.NewReader(content), nil)
	if err != nil {
		return failed(err)
	}
	return ran(fmt.Sprintf("wrote %d bytes to %s", w.Size, cmpOr(w.Path, p)))
}

// isTooLarge reports whether err says a file is over the read's cap.
func isTooLarge(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && (ae.Code == api.CodeTooLarge || (ae.Code == api.CodeFile && (ae.Errno == "ETOOBIG" || ae.Errno == "EFBIG")))
}

// readFile reads p (file.read, at most ReadFileCap bytes). A longer file
// shows its first ReadFileCap bytes, read with head -c in the sandbox,
// and a note.
func readFile(ctx context.Context, x toolEnv, p string, limit time.Duration) toolResult {
	w := &capWriter{max: ReadFileCap}
	_, err := x.b.Call(ctx, x.o, api.OpFileRead, api.FilePath{Sandbox: x.sandbox, Path: p, MaxBytes: ReadFileCap}, nil, w)
	switch {
	case err == nil:
		if w.total > ReadFileCap {
			return ran(fileText(w.buf) + fmt.Sprintf("\n[truncated: the first %d of %d bytes]", ReadFileCap, w.total))
		}
		return ran(fileText(w.buf))
	case !isTooLarge(err):
		return failed(err)
	}
	size := "more than " + strconv.Itoa(ReadFileCap)
	if fi, err := callAs[sandbox.FileInfo](ctx, x, api.OpFileStat, api.FilePath{Sandbox: x.sandbox, Path: p}, nil, nil); err == nil {
		size = strconv.FormatInt(fi.Size, 10)
	}
	res, err := callAs[sandbox.Result](ctx, x, api.OpExec, api.Exec{
		Sandbox: x.sandbox, Args: []string{"head", "-c", strconv.Itoa(ReadFileCap), "--", p},
		TimeoutMs: limit.Milliseconds(), OutputLimit: 2 * ReadFileCap,
	}, nil, nil)
	if err != nil || res.ExitCode != 0 {
		t := failed(cmpErr(err, fmt.Errorf("the file is %s bytes, over read_file's cap of %d; read parts of it with shell_exec (head -c, tail -c, sed -n)", size, ReadFileCap)))
		return t
	}
	head := res.Stdout
	if len(head) > ReadFileCap {
		head = head[:ReadFileCap]
	}
	return ran(fileText([]byte(head)) + fmt.Sprintf("\n[truncated: the file is %s bytes; its first %d are shown. Read further with shell_exec (tail -c, sed -n)]", size, len(head)))
}

// cmpErr returns err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// fileText is a file's content as text (invalid UTF-8 shown as U+FFFD,
// with a note).
func fileText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "[not UTF-8 text: invalid bytes are shown as U+FFFD]\n" + strings.ToValidUTF8(string(b), "\uFFFD")
}

// listDir lists p (file.list): one entry a line, name, type and size.
func listDir(ctx context.Context, x toolEnv, p string) toolResult {
	l, err := callAs[api.DirList](ctx, x, api.OpFileList, api.FilePath{Sandbox: x.sandbox, Path: p}, nil, nil)
	if err != nil {
		return failed(err)
	}
	ents := slices.Clone(l.Entries)
	slices.SortFunc(ents, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d entries", cmpOr(l.Path, p), len(ents))
	for i, e := range ents {
		if i == maxEntries {
			fmt.Fprintf(&b, "\n[… %d more entries]", len(ents)-maxEntries)
			break
		}
		name := strings.ToValidUTF8(strings.ReplaceAll(e.Name, "\n", `\n`), "\uFFFD")
		fmt.Fprintf(&b, "\n%s\t%s\t%d", name, e.Type, e.Size)
		if e.Type == "symlink" && e.Target != "" {
			b.WriteString("\t-> " + strings.ToValidUTF8(e.Target, "\uFFFD"))
		}
	}
	return ran(b.String())
}

// fetchURL gets u through the sandbox's egress policy (Backend.Fetch).
func fetchURL(ctx context.Context, x toolEnv, u string) toolResult {
	res, err := x.b.Fetch(ctx, x.o, x.sandbox, u, FetchCap)
	if err != nil {
		if ctx.Err() != nil {
			return failed(ctx.Err())
		}
		r := failed(err)
		if !strings.HasPrefix(r.Text, "refused") {
			r.Text = "fetch refused or failed: " + err.Error()
		}
		r.gone = false
		return r
	}
	body := res.Body
	if len(body) > FetchCap {
		body = body[:FetchCap]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", res.Status)
	if res.ContentType != "" {
		b.WriteString(", " + strings.ToValidUTF8(res.ContentType, "\uFFFD"))
	}
	fmt.Fprintf(&b, ", %d bytes", len(body))
	if res.Truncated || len(res.Body) > FetchCap {
		fmt.Fprintf(&b, " (the body was cut at %d bytes)", FetchCap)
	}
	switch {
	case len(body) == 0:
	case utf8.Valid(body):
		b.WriteString("\n\n" + clipOutput(string(body)))
	default:
		b.WriteString("\n\n[binary body: not shown]")
	}
	return ran(b.String())
}
