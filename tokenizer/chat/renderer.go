package chat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// An executable started with rendererEnv set is a renderer: before any
// other package's work begins, it serves renders on its standard input
// and output, then exits when its input closes.
func init() {
	spec, ok := os.LookupEnv(rendererEnv)
	if !ok {
		return
	}
	os.Exit(serveRenderer(spec, os.Stdin, os.Stdout))
}

// serveRenderer sets the process's bounds from spec
// ("memory=N,stack=N,output=N") and answers requests until its input ends.
func serveRenderer(spec string, in io.Reader, out io.Writer) int {
	var memory int64
	var stack, output int
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "renderer: bad bound %q\n", kv)
			return 2
		}
		switch k {
		case "memory":
			memory = n
		case "stack":
			stack = int(n)
		case "output":
			output = int(n)
		}
	}
	if memory == 0 || stack == 0 || output == 0 {
		fmt.Fprintf(os.Stderr, "renderer: bounds %q lack one of memory, stack, output\n", spec)
		return 2
	}
	if err := limitData(memory); err != nil {
		fmt.Fprintf(os.Stderr, "renderer: %v\n", err)
		return 2
	}
	debug.SetMaxStack(stack)
	debug.SetMemoryLimit(memory / 2)

	if err := writeFrame(out, nil); err != nil {
		return 2
	}
	r := bufio.NewReader(in)
	compiled := map[string]*jinja.Template{}
	for {
		frame, err := readFrame(r, 1<<30)
		if err == io.EOF {
			return 0
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "renderer: %v\n", err)
			return 2
		}
		var req renderRequest
		var reply renderReply
		if err := json.Unmarshal(frame, &req); err != nil {
			reply.Error = fmt.Sprintf("unreadable request: %v", err)
		} else {
			reply = renderOne(&req, compiled, output, memory)
		}
		body, _ := json.Marshal(&reply)
		if err := writeFrame(out, body); err != nil {
			return 2
		}
	}
}

func renderOne(req *renderRequest, compiled map[string]*jinja.Template, output int, memory int64) renderReply {
	t := compiled[req.Source]
	if t == nil {
		var err error
		if t, err = jinja.Compile(req.Source); err != nil {
			return renderReply{Error: err.Error()}
		}
		if len(compiled) >= 8 {
			clear(compiled)
		}
		compiled[req.Source] = t
	}
	if req.ParseOnly {
		return renderReply{}
	}
	data := make(map[string]jinja.Value, len(req.Vars))
	for k, raw := range req.Vars {
		v, err := decodeJSON(raw)
		if err != nil {
			return renderReply{Error: fmt.Sprintf("%s: %v", k, err)}
		}
		data[k] = v
	}
	var asked int64
	if _, ok := data["range"]; !ok {
		data["range"] = boundedRange(memory, &asked)
	}
	s, err := t.RenderValues(data)
	if asked > 0 {
		return renderReply{Memory: asked}
	}
	if err != nil {
		return renderReply{Error: err.Error()}
	}
	if len(s) > output {
		return renderReply{Output: len(s)}
	}
	return renderReply{Text: s}
}

// rangeItemBytes is what one item of a range's list takes in the template
// engine: its value (24 bytes) and the boxed integer it holds.
const rangeItemBytes = 32

// boundedRange is the template engine's range builtin (Python's range,
// made into a list at once) that refuses a list whose items would take
// more than a quarter of memory bytes (room left for a copy or two of
// it), setting *asked to what they would take. The
// engine's own builtin would grow the list to the process's memory limit
// first, which takes most of a second and ends in a runtime fault rather
// than an error.
func boundedRange(memory int64, asked *int64) jinja.Value {
	return jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		start, stop, step := int64(0), int64(0), int64(1)
		switch len(args) {
		case 1:
			stop = rangeInt(args[0])
		case 2, 3:
			start, stop = rangeInt(args[0]), rangeInt(args[1])
			if len(args) == 3 {
				step = rangeInt(args[2])
			}
		default:
			return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
		}
		if step == 0 {
			return jinja.Undefined(), fmt.Errorf("range: step must not be zero")
		}
		n := rangeLen(start, stop, step)
		if n > uint64(memory/4/rangeItemBytes) {
			*asked = int64(min(n, math.MaxInt64/rangeItemBytes)) * rangeItemBytes
			return jinja.Undefined(), fmt.Errorf("range: %d items take more than the memory bound", n)
		}
		items := make([]jinja.Value, n)
		for i := range items {
			items[i] = jinja.NewInt(start + int64(i)*step)
		}
		return jinja.NewList(items), nil
	})
}

// rangeLen is how many items range(start, stop, step) has, without
// overflowing for any int64 bounds.
func rangeLen(start, stop, step int64) uint64 {
	if step > 0 && start < stop {
		return (uint64(stop-start)-1)/uint64(step) + 1
	}
	if step < 0 && start > stop {
		return (uint64(start-stop)-1)/(uint64(-(step+1))+1) + 1
	}
	return 0
}

// rangeInt reads a range argument as the template engine does: integers
// as they are, floats truncated, booleans as 0 or 1, strings by their
// leading decimal digits, anything else as 0.
func rangeInt(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
		return 0
	case v.IsString():
		var n int64
		fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}
