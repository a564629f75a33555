package reply

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testTools are a request's tools: one with typed parameters, one with a
// string and a list.
var testTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"city": {"type": "string"},
		"days": {"type": "integer"},
		"metric": {"type": "boolean"}},
		"required": ["city"]}`)},
	{Name: "search", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"query": {"type": "string"},
		"tags": {"type": "array", "items": {"type": "string"}}},
		"required": ["query"]}`)},
}

// The calls every format's sample reply makes.
var (
	weatherCall = ToolCall{Name: "get_weather", Arguments: `{"city":"Paris","days":3}`}
	searchCall  = ToolCall{Name: "search", Arguments: `{"query":"a < b & c","tags":["x","y"]}`}
)

var think = &Reasoning{"<think>", "</think>"}

// formatCase is a format's sample reply: text, then a call of each tool.
type formatCase struct {
	reasoning *Reasoning // the format's own reasoning markers, if any
	// calls is the two calls after "Let me check." and whitespace.
	calls string
	// one is a call of get_weather alone.
	one string
}

var formatCases = map[string]formatCase{
	"json_tools": {
		calls: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}}\n</tool_call>",
		one: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"}\n</tool_call>",
	},
	"llama3_json": {
		calls: "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; " +
			"{\"name\": \"search\", \"parameters\": {\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}}",
		one: "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
	},
	"mistral": {
		calls: "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}" +
			"[TOOL_CALLS]search[CALL_ID]a1b2c3d4e[ARGS]{\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}",
		one: "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}, \"id\": \"a1b2c3d4e\"}]",
	},
	"deepseek_v3": {
		calls: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜>\n" +
			"<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		one: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	},
	"deepseek_v31": {
		calls: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜>" +
			"<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		one: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	},
	"deepseek_v32": {
		calls: "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n" +
			"<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n" +
			"<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n" +
			"<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"query\" string=\"true\">a < b & c</｜DSML｜parameter>\n" +
			"<｜DSML｜parameter name=\"tags\" string=\"false\">[\"x\", \"y\"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
		one: "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n" +
			"<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n" +
			"<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
	},
	"harmony": {
		reasoning: &harmonyAnalysis,
		calls: "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}<|call|>" +
			"<|start|>assistant to=functions.search<|channel|>commentary json<|message|>{\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}<|call|>",
		one: "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}",
	},
	"kimi_k2": {
		calls: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|>" +
			"<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{'query': 'a < b & c', 'tags': ('x', 'y')}<|tool_call_end|><|tool_calls_section_end|>",
		one: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|><|tool_calls_section_end|>",
	},
	"qwen3_coder": {
		calls: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n" +
			"<tool_call>\n<function=search>\n<parameter=query>\na < b & c\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n</function>\n</tool_call>",
		one: "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3.0\n</parameter>\n</function>\n</tool_call>",
	},
	"glm47": {
		calls: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n" +
			"<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>a < b & c</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>[\"x\", \"y\"]</arg_value>\n</tool_call>",
		one: "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}</tool_call>",
	},
	"laguna": {
		calls: "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>" +
			"<tool_call>search<arg_key>query</arg_key><arg_value>a < b & c</arg_value><arg_key>tags</arg_key><arg_value>[\"x\",\"y\"]</arg_value></tool_call>",
		one: "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
	},
	"longcat": {
		reasoning: &Reasoning{"<longcat_think>", "</longcat_think>"},
		calls: "<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>\n" +
			"<longcat_arg_key>days</longcat_arg_key>\n<longcat_arg_value>3</longcat_arg_value>\n</longcat_tool_call>\n" +
			"<longcat_tool_call>search\n<longcat_arg_key>query</longcat_arg_key>\n<longcat_arg_value>a < b & c</longcat_arg_value>\n" +
			"<longcat_arg_key>tags</longcat_arg_key>\n<longcat_arg_value>[\"x\", \"y\"]</longcat_arg_value>\n</longcat_tool_call>",
		one: "<longcat_tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}</longcat_tool_call>",
	},
	"minimax_m2": {
		calls: "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n" +
			"<invoke name=\"search\">\n<parameter name=\"query\">a < b & c</parameter>\n<parameter name=\"tags\">[\"x\", \"y\"]</parameter>\n</invoke>\n</minimax:tool_call>",
		one: "<minimax:tool_call>\n<invoke name=get_weather>\n<parameter name='city'>\nParis\n</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n</minimax:tool_call>",
	},
	"minicpm5": {
		calls: "<function name=\"get_weather\"><param name=\"city\">Paris</param><param name=\"days\">3</param></function>\n" +
			"<function name=\"search\"><param name=\"query\"><![CDATA[a < b & c]]></param><param name=\"tags\">[\"x\", \"y\"]</param></function>",
		one: "<function name=\"get_weather\">\n<param name=\"city\">Paris</param>\n<param name=\"days\">3</param>\n</function>",
	},
	"muse_spark": {
		calls: "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">Paris</atem:parameter>\n<atem:parameter name=\"days\">3</atem:parameter>\n</atem:invoke>\n" +
			"<atem:invoke name=\"search\">\n<atem:parameter name=\"query\">a < b & c</atem:parameter>\n<atem:parameter name=\"tags\">[\"x\", \"y\"]</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
		one: "<atem:function_calls><atem:invoke name=\"get_weather\"><atem:parameter name=\"city\">Paris</atem:parameter><atem:parameter name=\"days\">3</atem:parameter></atem:invoke></atem:function_calls>",
	},
	"kimi_k3": {
		reasoning: &xtmlThink,
		calls: "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>" +
			"<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>" +
			"<|open|>argument key=\"days\" type=\"integer\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>" +
			"<|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}<|close|>json<|sep|><|close|>call<|sep|>" +
			"<|close|>tools<|sep|>",
		one: "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>" +
			"<|open|>argument key=\"city\"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key=\"days\"<|sep|>3<|close|>argument<|sep|>" +
			"<|close|>call<|sep|><|close|>tools<|sep|>",
	},
	"pythonic": {
		calls: "<|tool_call_start|>[get_weather(city=\"Paris\", days=3), search(query='a < b & c', tags=[\"x\", \"y\"])]<|tool_call_end|>",
		one:   "<|tool_call_start|>[get_weather(city=Paris, days=3)]<|tool_call_end|>",
	},
	"gemma4": {
		reasoning: &gemmaThought,
		calls: "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>\n" +
			"<|tool_call>call:search{query:<|\"|>a < b & c<|\"|>,tags:[<|\"|>x<|\"|>,<|\"|>y<|\"|>]}<tool_call|>",
		one: "<|tool_call>call:get_weather{\"city\": \"Paris\", days: 3}<tool_call|>",
	},
	"function_gemma": {
		calls: "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>" +
			"<start_function_call>call:search{query:<escape>a < b & c<escape>,tags:[<escape>x<escape>,<escape>y<escape>]}<end_function_call>",
		one: "<start_function_call>call:get_weather{city:<escape>Paris<escape>, days:3}<end_function_call>",
	},
}

// spec returns a format's Spec for tests: the format, and its reasoning
// markers (<think> where it has none of its own).
func (c formatCase) spec(t *testing.T, name string) Spec {
	f, ok := ByName(name)
	require.True(t, ok, name)
	r := c.reasoning
	if r == nil {
		r = think
	}
	return Spec{Tools: f, Reasoning: r}
}

// parse pushes the pieces of a reply to a new parser and returns all it
// gave back, its trace checked to account for every piece.
func parse(t *testing.T, s Spec, o ParserOptions, pieces []string) Delta {
	t.Helper()
	p := s.NewParser(o)
	var traced strings.Builder
	p.trace = func(kind, text string) { traced.WriteString(text) }
	var all Delta
	add := func(d Delta) {
		all.Content += d.Content
		all.Reasoning += d.Reasoning
		all.Calls = append(all.Calls, d.Calls...)
	}
	for _, piece := range pieces {
		add(p.Push(piece))
	}
	add(p.Finish())
	require.Equal(t, strings.Join(pieces, ""), traced.String(), "the trace does not account for the reply")
	return all
}

// splits returns a reply whole, one character at a time, and cut at
// random places.
func splits(s string) map[string][]string {
	out := map[string][]string{"whole": {s}}
	var chars []string
	for _, r := range s {
		chars = append(chars, string(r))
	}
	out["by character"] = chars
	rng := rand.New(rand.NewSource(int64(len(s))))
	for n := range 5 {
		var pieces []string
		rest := []rune(s)
		for len(rest) > 0 {
			k := 1 + rng.Intn(min(len(rest), 12))
			pieces = append(pieces, string(rest[:k]))
			rest = rest[k:]
		}
		out["random "+string(rune('a'+n))] = pieces
	}
	return out
}

// TestFormats parses every format's sample replies whole and in pieces:
// text and two calls; reasoning, text and a call; a call of another
// spelling; a call that does not parse; and the same markup without tools.
func TestFormats(t *testing.T) {
	for _, name := range FormatNames() {
		c, ok := formatCases[name]
		if !ok {
			t.Errorf("format %s has no test case", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := c.spec(t, name)
			tools := ParserOptions{Tools: testTools}
			r := s.Reasoning
			f := s.Tools.def
			end := f.end
			cases := []struct {
				name, reply string
				want        Delta
			}{
				{"two calls", "Let me check.\n\n" + c.calls,
					Delta{Content: "Let me check.", Calls: []ToolCall{weatherCall, searchCall}}},
				{"reasoning first", r.Start + "\nThe user wants weather.\n" + r.End + "\n\nSure. " + c.one,
					Delta{Reasoning: "The user wants weather.", Content: "Sure.", Calls: []ToolCall{weatherCall}}},
				{"not a call", "Hi " + f.starts[0] + "oops{" + end,
					Delta{Content: "Hi " + f.starts[0] + "oops{" + end}},
				{"one call alone", c.one, Delta{Calls: []ToolCall{weatherCall}}},
			}
			for _, tc := range cases {
				for how, pieces := range splits(tc.reply) {
					got := parse(t, s, tools, pieces)
					assert.Equal(t, tc.want, got, "%s, %s: %q", tc.name, how, tc.reply)
				}
			}
			// Without tools the markup is content; reasoning still splits.
			reply := r.Start + "hmm" + r.End + c.calls
			got := parse(t, s, ParserOptions{}, []string{reply})
			assert.Equal(t, "hmm", got.Reasoning)
			assert.Empty(t, got.Calls)
			if len(f.frames) == 0 {
				assert.Equal(t, c.calls, got.Content)
			}
		})
	}
}

// TestCutOff: a call cut off by the end of the reply is content, as the
// model wrote it; a call that is whole but lacks its end marker (a stop
// token the reply does not show) is a call.
func TestCutOff(t *testing.T) {
	s := formatCases["json_tools"].spec(t, "json_tools")
	o := ParserOptions{Tools: testTools}
	cut := "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"
	assert.Equal(t, Delta{Content: cut}, parse(t, s, o, []string{cut}))
	whole := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
	assert.Equal(t, Delta{Calls: []ToolCall{weatherCall}}, parse(t, s, o, []string{whole}))
	held := "Sure. <tool_"
	assert.Equal(t, Delta{Content: held}, parse(t, s, o, []string{held}))
}

// TestLlama3Leading: a Llama 3 call needs no marker where content begins;
// a reply that begins with JSON that is not a call is content, and text
// after the calls is content.
func TestLlama3Leading(t *testing.T) {
	s := formatCases["llama3_json"].spec(t, "llama3_json")
	o := ParserOptions{Tools: testTools}
	for _, tc := range []struct {
		reply string
		want  Delta
	}{
		{"\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
			Delta{Calls: []ToolCall{weatherCall}}},
		{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}\n{\"name\": \"search\", \"parameters\": {\"query\": \"a < b & c\", \"tags\": [\"x\", \"y\"]}}\nDone.",
			Delta{Calls: []ToolCall{weatherCall, searchCall}, Content: "Done."}},
		{"{\"answer\": 42}", Delta{Content: "{\"answer\": 42}"}},
		{"The answer is {\"name\": 1}", Delta{Content: "The answer is {\"name\": 1}"}},
		{"<think>hmm</think>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
			Delta{Reasoning: "hmm", Calls: []ToolCall{weatherCall}}},
		{"  ", Delta{Content: "  "}},
	} {
		for how, pieces := range splits(tc.reply) {
			assert.Equal(t, tc.want, parse(t, s, o, pieces), "%s: %q", how, tc.reply)
		}
	}
}

// TestHarmony: gpt-oss's channels: analysis is reasoning, final and
// commentary without a recipient are content, their headers are dropped
// with or without tools.
func TestHarmony(t *testing.T) {
	s := formatCases["harmony"].spec(t, "harmony")
	reply := "<|channel|>analysis<|message|>User asks weather.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>"
	want := Delta{Reasoning: "User asks weather.", Content: "It is sunny."}
	for _, o := range []ParserOptions{{}, {Tools: testTools}} {
		for how, pieces := range splits(reply) {
			assert.Equal(t, want, parse(t, s, o, pieces), how)
		}
	}
	// The recipient in the header the prompt opened.
	call := " to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"city\":\"Paris\",\"days\":3}"
	assert.Equal(t, Delta{Calls: []ToolCall{weatherCall}}, parse(t, s, ParserOptions{Tools: testTools}, []string{call}))
}

// TestTyping: text values take their parameter's type where the schema
// gives one they read as, and stay strings otherwise.
func TestTyping(t *testing.T) {
	tools := []Tool{{Name: "f", Parameters: json.RawMessage(`{"properties": {
		"i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
		"o": {"type": "object"}, "a": {"type": "array"}, "s": {"type": "string"},
		"opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
		"e": {"enum": [1, 2, 3]}}}`)}}
	s := formatCases["qwen3_coder"].spec(t, "qwen3_coder")
	param := func(k, v string) string { return "<parameter=" + k + ">\n" + v + "\n</parameter>\n" }
	reply := "<tool_call>\n<function=f>\n" +
		param("i", "12") + param("n", "1.5e3") + param("b", "True") + param("o", `{"k": [1, 2]}`) +
		param("a", "[1, 2]") + param("s", "007") + param("opt", "null") + param("e", "2") +
		param("unknown", "42") + param("i2", "x") +
		"</function>\n</tool_call>"
	got := parse(t, s, ParserOptions{Tools: tools}, []string{reply})
	require.Len(t, got.Calls, 1)
	assert.JSONEq(t, `{"i": 12, "n": 1.5e3, "b": true, "o": {"k": [1, 2]}, "a": [1, 2], "s": "007",
		"opt": null, "e": 2, "unknown": "42", "i2": "x"}`, got.Calls[0].Arguments)
	// A value that does not read as its type stays a string.
	reply = "<tool_call>\n<function=f>\n" + param("i", "twelve") + param("b", "maybe") + param("o", "[1]") + "</function>\n</tool_call>"
	got = parse(t, s, ParserOptions{Tools: tools}, []string{reply})
	require.Len(t, got.Calls, 1)
	assert.JSONEq(t, `{"i": "twelve", "b": "maybe", "o": "[1]"}`, got.Calls[0].Arguments)
}

// TestReasoning: reasoning splits with or without tools, the reply starts
// in reasoning where the prompt left a block open, and markers split
// across pieces are found.
func TestReasoning(t *testing.T) {
	s := Spec{Reasoning: think}
	for _, tc := range []struct {
		reply string
		in    bool
		want  Delta
	}{
		{"<think>\nA.\n</think>\n\nB.", false, Delta{Reasoning: "A.", Content: "B."}},
		{"A.\n</think>\n\nB.", true, Delta{Reasoning: "A.", Content: "B."}},
		{"A. </thin", true, Delta{Reasoning: "A. </thin"}},
		{"B. <think>A.", false, Delta{Content: "B.", Reasoning: "A."}},
		{"x <th y", false, Delta{Content: "x <th y"}},
		{"<tool_call>{}</tool_call>", false, Delta{Content: "<tool_call>{}</tool_call>"}},
	} {
		for how, pieces := range splits(tc.reply) {
			assert.Equal(t, tc.want, parse(t, s, ParserOptions{InReasoning: tc.in}, pieces), "%s: %q", how, tc.reply)
		}
	}
	assert.True(t, s.EndsInReasoning("<|im_start|>assistant\n<think>\n"))
	assert.False(t, s.EndsInReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
	assert.False(t, s.EndsInReasoning("<|im_start|>assistant\n"))
	assert.False(t, Spec{}.EndsInReasoning("<think>"))
}

// TestNoFormat: a Spec without a format leaves everything content.
func TestNoFormat(t *testing.T) {
	reply := "Hello <tool_call>{\"name\": \"x\"}</tool_call>\n"
	assert.Equal(t, Delta{Content: reply}, parse(t, Spec{}, ParserOptions{Tools: testTools}, []string{reply}))
}
