package client

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/api"
	"github.com/moat-sandbox/moat/internal/testutil"
	"github.com/moat-sandbox/moat/sandbox"
)

// fakeEnv switches the test binary into a fake `moat serve --stdio` when
// it is started as a client's child.
const fakeEnv = "MOAT_CLIENT_TEST_FAKE"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "stdio":
		fakeStdio(false)
		os.Exit(0)
	case "stuck":
		fakeStdio(true)
		os.Exit(0)
	}
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// fakeServer is a scripted JSON-RPC daemon; each request is handled in a
// goroutine of its own, so answers go out in any order.
type fakeServer struct {
	wmu     sync.Mutex
	mu      sync.Mutex
	files   map[string][]byte
	release chan struct{}
	once    sync.Once
}

type fakeRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

func (f *fakeServer) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func (f *fakeServer) reply(id json.RawMessage, result any) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func (f *fakeServer) fail(id json.RawMessage, e *api.Error) {
	f.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": api.RPCServerError, "message": e.Message, "data": e}})
}

func (f *fakeServer) event(id json.RawMessage, ev api.Event) {
	f.send(map[string]any{"jsonrpc": "2.0", "method": api.NotifyEvent, "params": map[string]any{"id": id, "event": ev}})
}

func fakeStdio(stuck bool) {
	f := &fakeServer{files: map[string][]byte{}, release: make(chan struct{})}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var req fakeRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			f.send(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": api.RPCParseError, "message": "parse error"}})
			continue
		}
		go f.handle(req)
	}
	if stuck {
		// Ignore the end of stdin, forever. (A bare select{} would be
		// reported as a deadlock by the runtime once nothing else runs.)
		for {
			time.Sleep(time.Hour)
		}
	}
}

func (f *fakeServer) handle(req fakeRequest) {
	id := req.ID
	switch req.Method {
	case "test.args":
		f.reply(id, os.Args[1:])
	case api.OpSandboxCreate:
		var p api.CreateSandbox
		json.Unmarshal(req.Params, &p)
		f.reply(id, api.Sandbox{ID: "sb-new", State: api.StateRunning, Labels: p.Labels, Hostname: p.Hostname})
	case api.OpSandboxGet:
		var p api.SandboxRef
		json.Unmarshal(req.Params, &p)
		switch p.Sandbox {
		case "missing":
			f.fail(id, &api.Error{Code: api.CodeNotFound, Message: "no sandbox missing"})
			return
		case "die":
			os.Exit(3)
		case "release":
			f.reply(id, api.Sandbox{ID: p.Sandbox})
			f.once.Do(func() { close(f.release) })
			return
		}
		f.reply(id, api.Sandbox{ID: p.Sandbox, State: api.StateRunning})
	case api.OpExec:
		var p api.Exec
		json.Unmarshal(req.Params, &p)
		if !p.Stream {
			f.reply(id, sandbox.Result{ExitCode: 0, Stdout: p.Sandbox + ": " + strings.Join(p.Args, " ")})
			return
		}
		f.event(id, api.Event{Seq: 1, Type: api.EventStdout, Text: "hello\n"})
		f.event(id, api.Event{Seq: 2, Type: api.EventStderr, Data: []byte{0xff, 0xfe}})
		res := sandbox.Result{ExitCode: 3, ExitReason: sandbox.ReasonExited}
		switch p.Args[0] {
		case "busy":
			f.fail(id, &api.Error{Code: api.CodeBusy, Message: "another exec runs"})
			return
		case "with-exit":
			f.event(id, api.Event{Seq: 3, Type: api.EventExit, Result: &res})
		}
		f.reply(id, res)
	case api.OpOutput:
		var p api.ReadOutput
		json.Unmarshal(req.Params, &p)
		switch p.Sandbox {
		case "slow":
			f.event(id, api.Event{Seq: 1, Type: api.EventStdout, Text: "waiting\n"})
			<-f.release
			f.event(id, api.Event{Seq: 2, Type: api.EventStdout, Text: "released\n"})
		case "hang":
			f.event(id, api.Event{Seq: 1, Type: api.EventStdout, Text: "tick\n"})
			select {}
		default:
			f.event(id, api.Event{Seq: p.After + 1, Type: api.EventLost})
			f.event(id, api.Event{Seq: p.After + 2, Type: api.EventStdout, Text: "out\n"})
		}
		res := &sandbox.Result{ExitCode: 7}
		if p.Process == 1 {
			f.event(id, api.Event{Seq: p.After + 3, Type: api.EventExit, Result: res})
		}
		f.reply(id, api.Process{ID: p.Process, Sandbox: p.Sandbox, State: api.ProcExited, Result: res})
	case api.OpWait:
		var p api.ProcessRef
		json.Unmarshal(req.Params, &p)
		f.reply(id, api.Process{ID: p.Process, Sandbox: p.Sandbox, State: api.ProcExited, Result: &sandbox.Result{ExitCode: 1}})
	case api.OpFileWrite, api.OpFileUpload:
		var p api.WriteFile
		json.Unmarshal(req.Params, &p)
		f.mu.Lock()
		f.files[p.Path] = p.Content
		f.mu.Unlock()
		f.reply(id, api.Written{Path: p.Path + "#" + p.Mode, Size: int64(len(p.Content))})
	case api.OpFileRead, api.OpFileDownload:
		var p api.FilePath
		json.Unmarshal(req.Params, &p)
		f.mu.Lock()
		b, ok := f.files[p.Path]
		f.mu.Unlock()
		if !ok {
			f.fail(id, &api.Error{Code: api.CodeFile, Errno: "ENOENT", Message: "no such file"})
			return
		}
		f.reply(id, api.FileContent{Path: p.Path, Size: int64(len(b)), Content: b})
	case api.OpBuildCreate:
		var p api.CreateBuild
		json.Unmarshal(req.Params, &p)
		f.reply(id, api.Build{ID: "bld-stdio", Status: api.BuildSucceeded, Message: fmt.Sprintf("%s: %d bytes", strings.Join(p.Command, " "), len(p.Content))})
	case api.OpBuildLog:
		var p api.BuildLogRequest
		json.Unmarshal(req.Params, &p)
		f.event(id, api.Event{Seq: 1, Type: api.EventStdout, Text: "one\n"})
		f.event(id, api.Event{Seq: 2, Type: api.EventStdout, Data: []byte("two\n")})
		f.reply(id, api.Build{ID: p.ID, Status: api.BuildSucceeded})
	case api.OpBuildArtifact:
		var p api.BuildArtifactRef
		json.Unmarshal(req.Params, &p)
		f.reply(id, api.FileContent{Path: p.Digest, Content: []byte("artifact " + p.Digest)})
	default:
		f.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": api.RPCMethodNotFound, "message": "no method " + req.Method}})
	}
}
