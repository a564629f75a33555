package chat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
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
			reply = renderOne(&req, compiled, output)
		}
		body, _ := json.Marshal(&reply)
		if err := writeFrame(out, body); err != nil {
			return 2
		}
	}
}

func renderOne(req *renderRequest, compiled map[string]*jinja.Template, output int) renderReply {
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
	s, err := t.RenderValues(data)
	if err != nil {
		return renderReply{Error: err.Error()}
	}
	if len(s) > output {
		return renderReply{Output: len(s)}
	}
	return renderReply{Text: s}
}
