package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeAgents runs testdata/agents_serve.py against `archrun serve` on
// SmolLM2 with a chat template that has a tool-call format: the official
// openai client's agent loop (a call forced by tool_choice required, the
// tool's result fed back, an answer; streamed calls; a named function),
// structured output over testdata/schemas.json (greedy and sampled), the
// Responses API, the anthropic client's Messages API and the openai-agents
// SDK's agent loop over both of OpenAI's APIs. Every structured
// reply and tool call the script received is then validated against its
// schema here, by a JSON-schema validator of its own.
func TestServeAgents(t *testing.T) {
	python, err := filepath.Abs("../../.deps/py/bin/python")
	require.NoError(t, err)
	_, err = os.Stat(smolLM2)
	require.NoError(t, err, "run `make models` first")
	bin := serverBinary(t)
	_, base, stderr := startServer(t, bin, "-gguf", smolLM2, "-served-model-name", "smollm2", "-max-batch", "4",
		"-chat-template", "testdata/chatml_tools.jinja")
	out := filepath.Join(t.TempDir(), "received.json")
	py := exec.Command(python, "testdata/agents_serve.py", base, "testdata/schemas.json", out)
	log, err := py.CombinedOutput()
	t.Logf("clients:\n%s", log)
	require.NoError(t, err, "server log:\n%s", stderr.String())
	require.Contains(t, string(log), "all checks passed")

	var spec struct {
		Schemas     map[string]json.RawMessage `json:"schemas"`
		WeatherTool struct {
			Function struct {
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"weather_tool"`
		TimeTool struct {
			Function struct {
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"time_tool"`
	}
	readJSONFile(t, "testdata/schemas.json", &spec)
	var got struct {
		Structured []struct{ Schema, Mode, Text, Finish string } `json:"structured"`
		Calls      []struct{ Tool, Arguments string }            `json:"calls"`
	}
	readJSONFile(t, out, &got)
	compile := func(name string, raw json.RawMessage) *jsonschema.Schema {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		require.NoError(t, c.AddResource(name+".json", doc))
		s, err := c.Compile(name + ".json")
		require.NoError(t, err)
		return s
	}
	valid := func(s *jsonschema.Schema, text, what string) {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if !assert.NoError(t, err, "%s: not JSON: %q", what, text) {
			return
		}
		assert.NoError(t, s.Validate(v), "%s: %q", what, text)
	}
	seen := map[string]bool{}
	for _, r := range got.Structured {
		seen[r.Schema] = true
		assert.NotEqual(t, "length", r.Finish, "%s, %s: cut off", r.Schema, r.Mode)
		valid(compile(r.Schema, spec.Schemas[r.Schema]), r.Text, r.Schema+", "+r.Mode)
	}
	assert.Len(t, seen, len(spec.Schemas), "every schema was asked for")
	tools := map[string]*jsonschema.Schema{
		"get_weather": compile("get_weather", spec.WeatherTool.Function.Parameters),
		"get_time":    compile("get_time", spec.TimeTool.Function.Parameters),
	}
	require.NotEmpty(t, got.Calls)
	for _, c := range got.Calls {
		valid(tools[c.Tool], c.Arguments, "a call of "+c.Tool)
	}
}

func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v))
}
