package chat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds limit the renders of a template that came with a model's files.
// A bounded template (CompileBounded) renders in a renderer process: a
// copy of the running executable, started with an empty environment and
// kept for later renders, that holds no files open but its two pipes. A
// render that runs past its time is killed with its process; one that
// recurses past its stack, allocates past its memory, or panics ends its
// process; each comes back as a *BoundError, and the next render starts a
// fresh process. Zero fields take the defaults.
type Bounds struct {
	// Time is one render's wall time, parsing included (default 2s).
	Time time.Duration
	// Output is the most bytes one render may produce (default 4 MiB).
	Output int
	// Memory is what the renderer may map beyond what it maps when it
	// starts: heap and stacks (on Linux, RLIMIT_AS and RLIMIT_DATA;
	// elsewhere the Go runtime's soft limit; default 512 MiB).
	Memory int64
	// Stack is the renderer's goroutine stack, which bounds recursion
	// (default 16 MiB: tens of thousands of nested calls).
	Stack int
	// Renderers is how many renders run at once, each in its own process
	// (default 2: a render takes well under a millisecond of a request
	// that takes seconds, and each renderer holds about 35 MiB).
	Renderers int
}

// DefaultBounds are the bounds a zero Bounds takes.
var DefaultBounds = Bounds{
	Time:   2 * time.Second,
	Output: 4 << 20,
	Memory: 512 << 20,
	Stack:  16 << 20,
}

func (b Bounds) withDefaults() Bounds {
	if b.Time <= 0 {
		b.Time = DefaultBounds.Time
	}
	if b.Output <= 0 {
		b.Output = DefaultBounds.Output
	}
	if b.Memory <= 0 {
		b.Memory = DefaultBounds.Memory
	}
	if b.Stack <= 0 {
		b.Stack = DefaultBounds.Stack
	}
	if b.Renderers <= 0 {
		b.Renderers = 2
	}
	return b
}

// BoundError is the error of a render that passed one of its bounds or
// stopped its renderer.
type BoundError struct {
	// Template names the template (where it was read from).
	Template string
	// Bound is "time", "output", "memory", "recursion" or "crash" (the
	// renderer stopped otherwise while rendering: a panic in the template
	// engine).
	Bound string
	// Detail says what was passed: the limit, or the renderer's message.
	Detail string
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("chat template %s: the render %s", e.Template, e.Detail)
}

// ErrRenderer wraps the errors of starting or talking to a renderer
// process: a fault of the host, not of the template.
var ErrRenderer = errors.New("chat template renderer")

// CompileBounded parses a chat template in a renderer process and returns
// a template whose every render runs there within b. name says where the
// template came from (a file, a GGUF key) for errors. A template that
// breaks a bound while being parsed fails here with a *BoundError.
func CompileBounded(name, src string, b Bounds) (*Template, error) {
	if src == "" {
		return nil, fmt.Errorf("chat template %s is empty", name)
	}
	t := &Template{src: src, name: name, pool: poolFor(b.withDefaults())}
	if _, err := t.pool.call(name, &renderRequest{Source: src, ParseOnly: true}); err != nil {
		return nil, err
	}
	return t, nil
}

// renderRequest is what a renderer process reads: a template and its
// variables, each as JSON.
type renderRequest struct {
	Source    string                     `json:"source"`
	Vars      map[string]json.RawMessage `json:"vars,omitempty"`
	ParseOnly bool                       `json:"parse_only,omitempty"`
}

// renderReply is what it writes back.
type renderReply struct {
	Text  string `json:"text"`
	Error string `json:"error,omitempty"`
	// Output is set when the text passed the output bound.
	Output int `json:"output,omitempty"`
	// Memory is set when a builtin was asked for more bytes than the
	// memory bound (range's list) and refused before allocating them.
	Memory int64 `json:"memory,omitempty"`
}

// pools are kept per Bounds for the life of the process: templates with
// the same bounds share their renderers.
var (
	poolsMu sync.Mutex
	pools   = map[Bounds]*pool{}
)

func poolFor(b Bounds) *pool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	p := pools[b]
	if p == nil {
		p = &pool{b: b, slots: make(chan struct{}, b.Renderers), idle: make(chan *renderer, b.Renderers)}
		pools[b] = p
	}
	return p
}

// pool holds up to b.Renderers renderer processes; a render takes a slot,
// then an idle renderer or a new one.
type pool struct {
	b     Bounds
	slots chan struct{}
	idle  chan *renderer
}

func (p *pool) call(name string, req *renderRequest) (string, error) {
	p.slots <- struct{}{}
	defer func() { <-p.slots }()
	var r *renderer
	select {
	case r = <-p.idle:
		select {
		case <-r.done: // it ended while idle (killed from outside)
			r.in.Close()
			r.out.Close()
			r = nil
		default:
		}
	default:
	}
	if r == nil {
		var err error
		if r, err = startRenderer(p.b); err != nil {
			return "", err
		}
	}
	reply, err := r.exchange(req, p.b)
	if err != nil {
		return "", r.fail(name, err, p.b)
	}
	p.idle <- r
	if reply.Output > 0 {
		return "", &BoundError{Template: name, Bound: "output",
			Detail: fmt.Sprintf("produced %d bytes, more than its bound of %d", reply.Output, p.b.Output)}
	}
	if reply.Memory > 0 {
		return "", &BoundError{Template: name, Bound: "memory",
			Detail: fmt.Sprintf("asked for %d MiB, past its memory bound of %d MiB", reply.Memory>>20, p.b.Memory>>20)}
	}
	if reply.Error != "" {
		return "", fmt.Errorf("chat template: %s", reply.Error)
	}
	return reply.Text, nil
}

// renderer is one renderer process and the two pipes to it.
type renderer struct {
	cmd    *exec.Cmd
	in     *os.File // its standard input
	out    *os.File // its standard output
	stderr *headWriter
	done   chan struct{} // closed when the process has ended
}

// rendererEnv names the variable that turns an executable into a renderer
// (see serveRenderer); its value holds the bounds.
const rendererEnv = "ARCHGEN_CHAT_RENDERER"

func startRenderer(b Bounds) (*renderer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%w: no executable to start: %v", ErrRenderer, err)
	}
	childIn, in, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRenderer, err)
	}
	out, childOut, err := os.Pipe()
	if err != nil {
		childIn.Close()
		in.Close()
		return nil, fmt.Errorf("%w: %v", ErrRenderer, err)
	}
	r := &renderer{in: in, out: out, stderr: &headWriter{max: 16 << 10}, done: make(chan struct{})}
	r.cmd = exec.Command(exe)
	r.cmd.Env = []string{
		fmt.Sprintf("%s=memory=%d,stack=%d,output=%d", rendererEnv, b.Memory, b.Stack, b.Output),
		"GOMAXPROCS=1",
	}
	// The loader's search path, where the executable's libraries need it.
	for _, k := range []string{"LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"} {
		if v, ok := os.LookupEnv(k); ok {
			r.cmd.Env = append(r.cmd.Env, k+"="+v)
		}
	}
	r.cmd.Dir = "/"
	r.cmd.Stdin, r.cmd.Stdout, r.cmd.Stderr = childIn, childOut, r.stderr
	setRendererAttrs(r.cmd)
	err = r.cmd.Start()
	childIn.Close()
	childOut.Close()
	if err != nil {
		in.Close()
		out.Close()
		return nil, fmt.Errorf("%w: starting %s: %v", ErrRenderer, exe, err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	// A renderer says it is ready with an empty frame, so that a render's
	// time bound does not count the process's start.
	r.out.SetReadDeadline(time.Now().Add(rendererStart))
	if _, err := readFrame(r.out, 0); err != nil {
		r.cmd.Process.Kill()
		in.Close()
		out.Close()
		<-r.done
		line, _, _ := strings.Cut(r.stderr.String(), "\n")
		return nil, fmt.Errorf("%w: %s did not start: %v %s", ErrRenderer, exe, err, line)
	}
	return r, nil
}

// rendererStart is how long a renderer may take to start.
const rendererStart = 30 * time.Second

// exchange sends one request and reads its reply within b.Time.
func (r *renderer) exchange(req *renderRequest, b Bounds) (*renderReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(b.Time)
	r.in.SetWriteDeadline(deadline)
	r.out.SetReadDeadline(deadline)
	if err := writeFrame(r.in, body); err != nil {
		return nil, err
	}
	// JSON may write each byte of the text as six.
	frame, err := readFrame(r.out, 6*b.Output+(1<<16))
	if err != nil {
		return nil, err
	}
	var reply renderReply
	if err := json.Unmarshal(frame, &reply); err != nil {
		return nil, fmt.Errorf("%w: unreadable reply: %v", ErrRenderer, err)
	}
	return &reply, nil
}

// fail ends a renderer whose exchange failed and says why: the time bound,
// or what the process wrote as it stopped.
func (r *renderer) fail(name string, err error, b Bounds) error {
	timedOut := errors.Is(err, os.ErrDeadlineExceeded)
	r.cmd.Process.Kill()
	r.in.Close()
	r.out.Close()
	<-r.done
	if timedOut {
		return &BoundError{Template: name, Bound: "time", Detail: fmt.Sprintf("ran past its time bound of %v", b.Time)}
	}
	msg := r.stderr.String()
	if msg == "" {
		// It ended without a word: the pipes broke for another reason.
		return fmt.Errorf("%w stopped: %v (%v)", ErrRenderer, err, r.cmd.ProcessState)
	}
	line, _, _ := strings.Cut(msg, "\n")
	switch {
	case strings.Contains(msg, "stack exceeds") || strings.Contains(msg, "stack overflow"):
		return &BoundError{Template: name, Bound: "recursion",
			Detail: fmt.Sprintf("recursed past its stack bound of %d MiB", b.Stack>>20)}
	case strings.Contains(msg, "out of memory") || strings.Contains(msg, "cannot allocate memory") ||
		allocatorFault(msg) || nearMemoryBound(r.cmd.ProcessState, b):
		// The runtime may also fault in its collector when the kernel
		// refuses it memory: a process that got near its bound counts here.
		return &BoundError{Template: name, Bound: "memory",
			Detail: fmt.Sprintf("ran past its memory bound of %d MiB", b.Memory>>20)}
	}
	return &BoundError{Template: name, Bound: "crash", Detail: "stopped the template engine: " + line}
}

// allocatorFault says whether a renderer's last words are a signal taken
// inside the Go runtime's allocator: where it ends when the kernel refuses
// it memory at a point that does not check for that.
func allocatorFault(msg string) bool {
	if !strings.Contains(msg, "unexpected signal during runtime execution") && !strings.HasPrefix(msg, "SIGSEGV") {
		return false
	}
	for _, frame := range []string{"runtime.mallocgc", "runtime.(*mheap)", "runtime.sysMap", "runtime.sysAlloc",
		"runtime.persistentalloc", "runtime.growslice", "runtime.(*mcache)", "runtime.(*mcentral)"} {
		if strings.Contains(msg, frame) {
			return true
		}
	}
	return false
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (w *headWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func writeFrame(w io.Writer, body []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(body)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

func readFrame(r io.Reader, limit int) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := int(binary.LittleEndian.Uint32(n[:]))
	if size > limit {
		return nil, fmt.Errorf("%w: a frame of %d bytes, more than %d", ErrRenderer, size, limit)
	}
	body := make([]byte, size)
	_, err := io.ReadFull(r, body)
	return body, err
}

// encodeVar writes a template variable as JSON for a renderer, so that it
// reads back as toValue reads it in process: json.RawMessage as it is,
// maps with sorted keys, and floats that stay floats when whole.
func encodeVar(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case json.RawMessage:
		if !json.Valid(x) {
			return fmt.Errorf("chat: a JSON value that does not parse")
		}
		buf.Write(x)
	case []json.RawMessage:
		return encodeList(buf, x)
	case []any:
		return encodeList(buf, x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := encodeVar(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case float32:
		return encodeFloat(buf, float64(x))
	case float64:
		return encodeFloat(buf, x)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("chat: %v", err)
		}
		buf.Write(b)
	}
	return nil
}

func encodeList[T any](buf *bytes.Buffer, items []T) error {
	buf.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := encodeVar(buf, it); err != nil {
			return err
		}
	}
	buf.WriteByte(']')
	return nil
}

func encodeFloat(buf *bytes.Buffer, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("chat: %v has no JSON form for a bounded template", f)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	buf.WriteString(s)
	return nil
}
