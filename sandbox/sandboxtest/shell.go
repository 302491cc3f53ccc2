package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// shell runs argv and sh -c scripts with the builtins (see the package
// doc).
type shell struct {
	s      *Sandbox
	ctx    context.Context
	env    []string
	vars   map[string]string
	cwd    string
	last   int
	exited bool
}

type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// binDirs are where a command named by path is taken for a builtin.
var binDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/usr/local/bin": true, "/sbin": true, "/usr/sbin": true}

// resolve maps argv[0] to a builtin's name, or "".
func resolve(arg0 string) string {
	name := arg0
	if strings.Contains(arg0, "/") {
		if !binDirs[path.Dir(arg0)] {
			return ""
		}
		name = path.Base(arg0)
	}
	if _, ok := builtins[name]; ok {
		return name
	}
	return ""
}

// top runs a process's argv; it returns the status and, for a command
// that could not be run, the Result's error.
func (sh *shell) top(args []string, in io.Reader, out, errw io.Writer) (int, string) {
	st := stdio{in, out, errw}
	if name := resolve(args[0]); name != "" {
		return builtins[name](sh, args, st), ""
	}
	if code, ok := sh.handle(args, st); ok {
		return code, ""
	}
	return 127, fmt.Sprintf("exec %s: no such file or directory (fake runtime: not a builtin)", args[0])
}

func (sh *shell) handle(args []string, st stdio) (int, bool) {
	h := sh.s.r.handler
	if h == nil {
		return 0, false
	}
	return h(sh.ctx, &Cmd{Args: args, Env: sh.env, Cwd: sh.cwd, Stdin: st.in, Stdout: st.out, Stderr: st.err, Files: sh.s.fs})
}

// exec runs one command inside a script.
func (sh *shell) exec(args []string, st stdio) int {
	if name := resolve(args[0]); name != "" {
		return builtins[name](sh, args, st)
	}
	if code, ok := sh.handle(args, st); ok {
		return code
	}
	fmt.Fprintf(st.err, "sh: 1: %s: not found\n", args[0])
	return 127
}

func (sh *shell) path(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = path.Join(sh.cwd, p)
	}
	return path.Clean(p)
}

func (sh *shell) getenv(k string) (string, bool) {
	if v, ok := sh.vars[k]; ok {
		return v, true
	}
	for i := len(sh.env) - 1; i >= 0; i-- {
		if a, b, ok := strings.Cut(sh.env[i], "="); ok && a == k {
			return b, true
		}
	}
	return "", false
}

// ---- parsing ----

type part struct {
	s   string
	lit bool // single-quoted or escaped: no expansion
}

type word []part

type tok struct {
	op string // "" for a word
	w  word
}

func tokenize(src string) ([]tok, error) {
	var toks []tok
	var cur word
	var lit strings.Builder
	in := false
	flushLit := func() {
		if lit.Len() > 0 {
			cur = append(cur, part{s: lit.String()})
			lit.Reset()
		}
	}
	end := func() {
		flushLit()
		if in {
			toks = append(toks, tok{w: cur})
		}
		cur, in = nil, false
	}
	op := func(o string) { end(); toks = append(toks, tok{op: o}) }
	for i := 0; i < len(src); i++ {
		c := src[i]
		next := byte(0)
		if i+1 < len(src) {
			next = src[i+1]
		}
		switch {
		case c == ' ' || c == '\t':
			end()
		case c == '\n' || c == ';':
			op(";")
		case c == '#' && !in:
			for i < len(src) && src[i] != '\n' {
				i++
			}
			i--
		case c == '&':
			if next != '&' {
				return nil, errors.New("background jobs (&) are not supported")
			}
			op("&&")
			i++
		case c == '|':
			if next == '|' {
				op("||")
				i++
			} else {
				op("|")
			}
		case c == '>' || c == '<':
			fd := ""
			if in && len(cur) == 0 && lit.String() == "2" {
				lit.Reset()
				in = false
				fd = "2"
			}
			end()
			o := fd + string(c)
			switch {
			case c == '>' && next == '>':
				o += ">"
				i++
			case c == '>' && next == '&' && i+2 < len(src) && (src[i+2] == '1' || src[i+2] == '2'):
				o += "&" + string(src[i+2])
				i += 2
			}
			toks = append(toks, tok{op: o})
		case c == '\'':
			j := strings.IndexByte(src[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			flushLit()
			cur, in = append(cur, part{s: src[i+1 : i+1+j], lit: true}), true
			i += j + 1
		case c == '"':
			flushLit()
			in = true
			var b strings.Builder
			i++
			for ; i < len(src) && src[i] != '"'; i++ {
				if src[i] == '\\' && i+1 < len(src) && strings.IndexByte("\"\\$`", src[i+1]) >= 0 {
					i++
				}
				b.WriteByte(src[i])
			}
			if i >= len(src) {
				return nil, errors.New("unterminated quote")
			}
			cur = append(cur, part{s: b.String()})
		case c == '\\':
			if next == '\n' {
				i++
				continue
			}
			flushLit()
			in = true
			if i+1 < len(src) {
				cur = append(cur, part{s: string(next), lit: true})
				i++
			}
		default:
			in = true
			lit.WriteByte(c)
		}
	}
	end()
	return toks, nil
}

type list struct {
	items []*pipeline
	ops   []string // between items: ";", "&&", "||"
}

type pipeline struct{ cmds []*command }

type redir struct {
	op     string
	target word
}

type command struct {
	args   []word
	redirs []redir
	cond   *list // a while loop's
	body   *list
}

type parser struct {
	toks []tok
	i    int
}

func (p *parser) peekWord(kw string) bool {
	if p.i >= len(p.toks) {
		return false
	}
	t := p.toks[p.i]
	return t.op == "" && len(t.w) == 1 && !t.w[0].lit && t.w[0].s == kw
}

func (p *parser) list(stops ...string) (*list, error) {
	l := &list{}
	for {
		for p.i < len(p.toks) && p.toks[p.i].op == ";" {
			p.i++
		}
		if p.i >= len(p.toks) {
			break
		}
		stop := false
		for _, s := range stops {
			stop = stop || p.peekWord(s)
		}
		if stop {
			break
		}
		if len(l.items) > len(l.ops) {
			l.ops = append(l.ops, ";")
		}
		pl, err := p.pipeline()
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, pl)
		if p.i < len(p.toks) {
			if o := p.toks[p.i].op; o == "&&" || o == "||" {
				l.ops = append(l.ops, o)
				p.i++
				continue
			}
		}
	}
	if len(l.ops) >= len(l.items) && len(l.items) > 0 {
		return nil, errors.New("a command is missing after && or ||")
	}
	return l, nil
}

func (p *parser) pipeline() (*pipeline, error) {
	pl := &pipeline{}
	for {
		c, err := p.command()
		if err != nil {
			return nil, err
		}
		pl.cmds = append(pl.cmds, c)
		if p.i < len(p.toks) && p.toks[p.i].op == "|" {
			p.i++
			continue
		}
		return pl, nil
	}
}

func (p *parser) command() (*command, error) {
	c := &command{}
	if p.peekWord("while") {
		p.i++
		var err error
		if c.cond, err = p.list("do"); err != nil {
			return nil, err
		}
		if !p.peekWord("do") {
			return nil, errors.New("while without do")
		}
		p.i++
		if c.body, err = p.list("done"); err != nil {
			return nil, err
		}
		if !p.peekWord("done") {
			return nil, errors.New("while without done")
		}
		p.i++
	}
	for p.i < len(p.toks) {
		t := p.toks[p.i]
		switch t.op {
		case "":
			if c.cond != nil {
				return nil, errors.New("words after done")
			}
			c.args = append(c.args, t.w)
			p.i++
		case ">", ">>", "<", "2>", "2>>":
			if p.i+1 >= len(p.toks) || p.toks[p.i+1].op != "" {
				return nil, fmt.Errorf("%s without a file", t.op)
			}
			c.redirs = append(c.redirs, redir{t.op, p.toks[p.i+1].w})
			p.i += 2
		case ">&1", ">&2", "2>&1", "2>&2":
			c.redirs = append(c.redirs, redir{op: t.op})
			p.i++
		default:
			if len(c.args) == 0 && c.cond == nil && len(c.redirs) == 0 {
				return nil, fmt.Errorf("unexpected %q", t.op)
			}
			return c, nil
		}
	}
	if len(c.args) == 0 && c.cond == nil && len(c.redirs) == 0 {
		return nil, errors.New("unexpected end")
	}
	return c, nil
}

// ---- running ----

func (sh *shell) expand(w word) string {
	var b strings.Builder
	for _, p := range w {
		if p.lit {
			b.WriteString(p.s)
			continue
		}
		s := p.s
		for i := 0; i < len(s); i++ {
			if s[i] != '$' || i+1 >= len(s) {
				b.WriteByte(s[i])
				continue
			}
			j, name := i+1, ""
			if s[j] == '{' {
				k := strings.IndexByte(s[j:], '}')
				if k < 0 {
					b.WriteByte(s[i])
					continue
				}
				name, i = s[j+1:j+k], j+k
			} else if s[j] == '?' {
				b.WriteString(strconv.Itoa(sh.last))
				i = j
				continue
			} else if strings.IndexByte("#@0123456789", s[j]) >= 0 {
				name, i = s[j:j+1], j
			} else {
				k := j
				for k < len(s) && (s[k] == '_' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z' || k > j && s[k] >= '0' && s[k] <= '9') {
					k++
				}
				if k == j {
					b.WriteByte(s[i])
					continue
				}
				name, i = s[j:k], k-1
			}
			v, _ := sh.getenv(name)
			b.WriteString(v)
		}
	}
	return b.String()
}

// script runs src as sh -c does.
func (sh *shell) script(src string, st stdio) int {
	toks, err := tokenize(src)
	var l *list
	if err == nil {
		p := &parser{toks: toks}
		l, err = p.list()
		if err == nil && p.i < len(p.toks) {
			err = fmt.Errorf("unexpected %q", p.toks[p.i].op)
		}
	}
	if err != nil {
		fmt.Fprintf(st.err, "sh: syntax error (fake runtime's mini shell): %v\n", err)
		return 2
	}
	return sh.runList(l, st)
}

func (sh *shell) runList(l *list, st stdio) int {
	status := 0
	for i, pl := range l.items {
		if i > 0 {
			if op := l.ops[i-1]; op == "&&" && status != 0 || op == "||" && status == 0 {
				continue
			}
		}
		status = sh.runPipeline(pl, st)
		sh.last = status
		if sh.exited || sh.ctx.Err() != nil {
			break
		}
	}
	return status
}

func (sh *shell) runPipeline(pl *pipeline, st stdio) int {
	if len(pl.cmds) == 1 {
		return sh.runCommand(pl.cmds[0], st)
	}
	n := len(pl.cmds)
	prs := make([]*io.PipeReader, n-1)
	pws := make([]*io.PipeWriter, n-1)
	for i := range prs {
		prs[i], pws[i] = io.Pipe()
	}
	stopAll := context.AfterFunc(sh.ctx, func() {
		for i := range prs {
			prs[i].CloseWithError(errInterrupted)
			pws[i].CloseWithError(errInterrupted)
		}
	})
	defer stopAll()
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i, c := range pl.cmds {
		sub := *sh
		sub.vars = map[string]string{}
		for k, v := range sh.vars {
			sub.vars[k] = v
		}
		cst := st
		if i > 0 {
			cst.in = prs[i-1]
		}
		if i < n-1 {
			cst.out = pws[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = sub.runCommand(c, cst)
			if i < n-1 {
				pws[i].Close()
			}
			if i > 0 {
				prs[i-1].CloseWithError(io.ErrClosedPipe)
			}
		}()
	}
	wg.Wait()
	return codes[n-1]
}

// pending is an output redirection written when its command ends.
type pending struct {
	path     string
	buf      *bytes.Buffer
	appendTo bool
}

func (sh *shell) runCommand(c *command, st stdio) int {
	var outs []pending
	for _, r := range c.redirs {
		switch r.op {
		case ">&2":
			st.out = st.err
		case "2>&1":
			st.err = st.out
		case "<":
			p := sh.path(sh.expand(r.target))
			rd, err := sh.open(p, st)
			if err != nil {
				fmt.Fprintf(st.err, "sh: 1: cannot open %s: %s\n", p, errText(err))
				return 2
			}
			st.in = rd
		case ">", ">>", "2>", "2>>":
			p := sh.path(sh.expand(r.target))
			if p == "/dev/null" {
				if r.op[0] == '2' {
					st.err = io.Discard
				} else {
					st.out = io.Discard
				}
				continue
			}
			if p == "/dev/stderr" && r.op[0] != '2' {
				st.out = st.err
				continue
			}
			b := &bytes.Buffer{}
			outs = append(outs, pending{path: p, buf: b, appendTo: strings.HasSuffix(r.op, ">>")})
			if r.op[0] == '2' {
				st.err = b
			} else {
				st.out = b
			}
		}
	}
	status := 0
	switch {
	case c.cond != nil:
		for sh.ctx.Err() == nil && !sh.exited {
			if sh.runList(c.cond, st) != 0 {
				break
			}
			status = sh.runList(c.body, st)
		}
	case len(c.args) > 0:
		args := make([]string, len(c.args))
		for i, w := range c.args {
			args[i] = sh.expand(w)
		}
		status = sh.exec(args, st)
	}
	for _, o := range outs {
		if err := sh.writeOut(o); err != nil {
			fmt.Fprintf(st.err, "sh: 1: cannot create %s: %s\n", o.path, errText(err))
			if status == 0 {
				status = 2
			}
		}
	}
	return status
}

// writeOut stores a redirection's output (a FIFO: hands it to a reader).
func (sh *shell) writeOut(o pending) error {
	f := sh.s.fs
	f.mu.Lock()
	n, err := f.lookup("write", o.path, true)
	if err == nil && n.typ == "fifo" {
		ch := n.fifo
		f.mu.Unlock()
		select {
		case ch <- o.buf.Bytes():
			return nil
		case <-sh.ctx.Done():
			return sh.ctx.Err()
		}
	}
	if err == nil && n.typ == "dev" {
		f.mu.Unlock()
		return nil
	}
	defer f.mu.Unlock()
	return f.put("write", o.path, o.buf.Bytes(), 0o644, o.appendTo)
}

// open opens a path for reading.
func (sh *shell) open(p string, st stdio) (io.Reader, error) {
	switch p {
	case "/dev/zero":
		return zeros{sh.ctx}, nil
	case "/dev/null":
		return eofReader{}, nil
	case "/dev/stdin":
		return st.in, nil
	}
	f := sh.s.fs
	f.mu.Lock()
	n, err := f.lookup("open", p, true)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	switch n.typ {
	case "dir":
		f.mu.Unlock()
		return nil, ferr("open", p, "EISDIR", msgIsDir)
	case "fifo":
		ch := n.fifo
		f.mu.Unlock()
		select {
		case b := <-ch:
			return bytes.NewReader(b), nil
		case <-sh.ctx.Done():
			return nil, sh.ctx.Err()
		}
	}
	data := bytes.Clone(n.data)
	f.mu.Unlock()
	return bytes.NewReader(data), nil
}

type zeros struct{ ctx context.Context }

func (z zeros) Read(b []byte) (int, error) {
	if err := z.ctx.Err(); err != nil {
		return 0, err
	}
	clear(b)
	return len(b), nil
}

func errText(err error) string {
	var fe interface{ Error() string }
	fe = err
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return "Permission denied"
	case errors.Is(err, fs.ErrExist):
		return "File exists"
	}
	return fe.Error()
}

// ---- builtins ----

type builtin func(sh *shell, args []string, st stdio) int

var builtins map[string]builtin

func init() {
	builtins = map[string]builtin{
		"sh": bSh, "bash": bSh, "echo": bEcho, "printf": bPrintf, "cat": bCat, "head": bHead, "yes": bYes,
		"true":  func(*shell, []string, stdio) int { return 0 },
		"false": func(*shell, []string, stdio) int { return 1 },
		"exit":  bExit, "sleep": bSleep, "pwd": bPwd, "hostname": bHostname, "env": bEnv, "id": bID,
		"touch": bTouch, "mkdir": bMkdir, "rm": bRm, "mkfifo": bMkfifo, "read": bRead, "exec": bExec,
	}
}

func bSh(sh *shell, args []string, st stdio) int {
	if len(args) >= 3 && args[1] == "-c" {
		sub := *sh
		sub.vars = map[string]string{"0": "sh"}
		pos := args[3:]
		if len(pos) > 0 {
			sub.vars["0"], pos = pos[0], pos[1:]
		}
		for i, a := range pos {
			sub.vars[strconv.Itoa(i+1)] = a
		}
		sub.vars["#"], sub.vars["@"] = strconv.Itoa(len(pos)), strings.Join(pos, " ")
		return sub.script(args[2], st)
	}
	if len(args) == 1 {
		src, err := io.ReadAll(st.in)
		if err != nil {
			return 1
		}
		sub := *sh
		sub.vars = map[string]string{}
		return sub.script(string(src), st)
	}
	fmt.Fprintln(st.err, "sh: the fake runtime's shell supports sh -c SCRIPT only")
	return 2
}

func bEcho(sh *shell, args []string, st stdio) int {
	args = args[1:]
	nl := "\n"
	if len(args) > 0 && args[0] == "-n" {
		args, nl = args[1:], ""
	}
	_, err := io.WriteString(st.out, strings.Join(args, " ")+nl)
	return status(err)
}

func status(err error) int {
	if err != nil {
		return 1
	}
	return 0
}

// unescape handles printf's backslash escapes.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\':
			b.WriteByte('\\')
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v, k := 0, 0
			for ; k < 3 && i+k < len(s) && s[i+k] >= '0' && s[i+k] <= '7'; k++ {
				v = v*8 + int(s[i+k]-'0')
			}
			b.WriteByte(byte(v))
			i += k - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String()
}

func bPrintf(sh *shell, args []string, st stdio) int {
	if len(args) < 2 {
		fmt.Fprintln(st.err, "printf: usage: printf format [arguments]")
		return 2
	}
	format, rest := args[1], args[2:]
	var b strings.Builder
	for {
		for i := 0; i < len(format); i++ {
			if format[i] != '%' || i+1 >= len(format) {
				j := strings.IndexByte(format[i:], '%')
				if j <= 0 {
					j = len(format) - i
					if format[i] == '%' {
						j = 1
					}
				}
				b.WriteString(unescape(format[i : i+j]))
				i += j - 1
				continue
			}
			i++
			arg := ""
			if format[i] != '%' && len(rest) > 0 {
				arg, rest = rest[0], rest[1:]
			}
			switch format[i] {
			case '%':
				b.WriteByte('%')
			case 's':
				b.WriteString(arg)
			case 'b':
				b.WriteString(unescape(arg))
			case 'd':
				n, _ := strconv.Atoi(arg)
				b.WriteString(strconv.Itoa(n))
			default:
				b.WriteByte('%')
				b.WriteByte(format[i])
			}
		}
		if len(rest) == 0 || !strings.Contains(format, "%") {
			break
		}
	}
	_, err := io.WriteString(st.out, b.String())
	return status(err)
}

func bCat(sh *shell, args []string, st stdio) int {
	files := args[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	code := 0
	for _, f := range files {
		r := st.in
		if f != "-" {
			var err error
			if r, err = sh.open(sh.path(f), st); err != nil {
				fmt.Fprintf(st.err, "cat: %s: %s\n", f, errText(err))
				code = 1
				continue
			}
		}
		if _, err := io.Copy(st.out, r); err != nil {
			return 1
		}
	}
	return code
}

func bHead(sh *shell, args []string, st stdio) int {
	var n int64 = 10
	lines := true
	var files []string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-c" || a == "-n") && i+1 < len(args):
			v, err := strconv.ParseInt(args[i+1], 10, 64)
			if err != nil {
				fmt.Fprintf(st.err, "head: invalid number: %q\n", args[i+1])
				return 1
			}
			n, lines = v, a == "-n"
			i++
		default:
			files = append(files, a)
		}
	}
	r := st.in
	if len(files) > 0 && files[0] != "-" {
		var err error
		if r, err = sh.open(sh.path(files[0]), st); err != nil {
			fmt.Fprintf(st.err, "head: cannot open '%s' for reading: %s\n", files[0], errText(err))
			return 1
		}
	}
	if !lines {
		_, err := io.CopyN(st.out, r, n)
		if err != nil && err != io.EOF {
			return 1
		}
		return 0
	}
	b := make([]byte, 1)
	var line []byte
	for n > 0 {
		k, err := r.Read(b)
		if k == 1 {
			line = append(line, b[0])
			if b[0] == '\n' {
				if _, err := st.out.Write(line); err != nil {
					return 1
				}
				line, n = line[:0], n-1
			}
		}
		if err != nil {
			break
		}
	}
	if len(line) > 0 && n > 0 {
		_, _ = st.out.Write(line)
	}
	return 0
}

func bYes(sh *shell, args []string, st stdio) int {
	w := "y"
	if len(args) > 1 {
		w = strings.Join(args[1:], " ")
	}
	chunk := bytes.Repeat([]byte(w+"\n"), max(1, 8192/(len(w)+1)))
	for sh.ctx.Err() == nil {
		if _, err := st.out.Write(chunk); err != nil {
			return 141 // SIGPIPE
		}
	}
	return 1
}

func bExit(sh *shell, args []string, st stdio) int {
	sh.exited = true
	if len(args) > 1 {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			fmt.Fprintf(st.err, "sh: exit: illegal number: %s\n", args[1])
			return 2
		}
		return n & 0xff
	}
	return sh.last
}

func bSleep(sh *shell, args []string, st stdio) int {
	if len(args) != 2 {
		fmt.Fprintln(st.err, "sleep: usage: sleep SECONDS")
		return 1
	}
	secs, err := strconv.ParseFloat(args[1], 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(st.err, "sleep: invalid time interval '%s'\n", args[1])
		return 1
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-sh.ctx.Done():
		return 1
	}
}

func bPwd(sh *shell, args []string, st stdio) int {
	_, err := io.WriteString(st.out, sh.cwd+"\n")
	return status(err)
}

func bHostname(sh *shell, args []string, st stdio) int {
	_, err := io.WriteString(st.out, sh.s.hostname+"\n")
	return status(err)
}

func bEnv(sh *shell, args []string, st stdio) int {
	args = args[1:]
	sub := *sh
	sub.env = append([]string(nil), sh.env...)
	for len(args) > 0 && strings.Contains(args[0], "=") {
		sub.env = append(sub.env, args[0])
		args = args[1:]
	}
	if len(args) == 0 {
		for _, e := range sub.env {
			fmt.Fprintln(st.out, e)
		}
		return 0
	}
	return sub.exec(args, st)
}

func bID(sh *shell, args []string, st stdio) int {
	out := "uid=1000(user) gid=1000(user) groups=1000(user)\n"
	if len(args) > 1 && (args[1] == "-u" || args[1] == "-g") {
		out = "1000\n"
	}
	_, err := io.WriteString(st.out, out)
	return status(err)
}

// fsOp runs op on each path argument (flags are those starting with "-").
func fsOp(sh *shell, args []string, st stdio, op func(p string, flags string) error) int {
	flags, code := "", 0
	var paths []string
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags += a[1:]
		} else {
			paths = append(paths, a)
		}
	}
	if len(paths) == 0 {
		fmt.Fprintf(st.err, "%s: missing operand\n", args[0])
		return 1
	}
	for _, p := range paths {
		if err := op(sh.path(p), flags); err != nil {
			fmt.Fprintf(st.err, "%s: %s: %s\n", args[0], p, errText(err))
			code = 1
		}
	}
	return code
}

func bTouch(sh *shell, args []string, st stdio) int {
	f := sh.s.fs
	return fsOp(sh, args, st, func(p, _ string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if n, err := f.lookup("touch", p, true); err == nil {
			if n.ro {
				return ferr("touch", p, "EACCES", msgAccess)
			}
			n.mtime = time.Now()
			return nil
		}
		return f.put("touch", p, nil, 0o644, false)
	})
}

func bMkdir(sh *shell, args []string, st stdio) int {
	f := sh.s.fs
	return fsOp(sh, args, st, func(p, flags string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mkdir(p, 0o755, strings.Contains(flags, "p"))
	})
}

func bRm(sh *shell, args []string, st stdio) int {
	f := sh.s.fs
	return fsOp(sh, args, st, func(p, flags string) error {
		if n, err := f.lookupLocked(p); err == nil && n.typ == "dir" && !strings.ContainsAny(flags, "rR") {
			return ferr("rm", p, "EISDIR", msgIsDir)
		}
		err := f.Remove(sh.ctx, p, strings.ContainsAny(flags, "rR"))
		if errors.Is(err, fs.ErrNotExist) && strings.Contains(flags, "f") {
			return nil
		}
		return err
	})
}

func bMkfifo(sh *shell, args []string, st stdio) int {
	f := sh.s.fs
	return fsOp(sh, args, st, func(p, _ string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		dir, name, err := f.parent("mkfifo", p)
		if err != nil {
			return err
		}
		if dir.ro {
			return ferr("mkfifo", p, "EACCES", msgAccess)
		}
		if dir.kids[name] != nil {
			return ferr("mkfifo", p, "EEXIST", msgExist)
		}
		dir.kids[name] = &node{typ: "fifo", mode: 0o644, mtime: time.Now(), fifo: make(chan []byte)}
		return nil
	})
}

func bRead(sh *shell, args []string, st stdio) int {
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := st.in.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
		}
		if err != nil {
			if len(args) > 1 {
				sh.vars[args[1]] = string(line)
			}
			return 1
		}
	}
	if len(args) > 1 {
		sh.vars[args[1]] = strings.TrimSpace(string(line))
	}
	return 0
}

func bExec(sh *shell, args []string, st stdio) int {
	if len(args) == 1 {
		return 0
	}
	code := sh.exec(args[1:], st)
	sh.exited = true
	return code
}
