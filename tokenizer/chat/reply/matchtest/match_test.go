package matchtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/constrain"
	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/chat/reply"
	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// tools are a request's tools: one with typed parameters, one with a
// string and a list.
var tools = []reply.Tool{
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

var (
	think       = &reply.Reasoning{Start: "<think>", End: "</think>"}
	weatherCall = reply.ToolCall{Name: "get_weather", Arguments: `{"city":"Paris","days":3}`}
)

// grammarReplies are a call of get_weather(city="Paris", days=3) in each
// format, spelled as its grammar spells it.
var grammarReplies = map[string]string{
	"json_tools":   "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
	"llama3_json":  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
	"mistral":      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}",
	"deepseek_v3":  "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	"deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	"deepseek_v32": "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n" +
		"<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
	"harmony":     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}<|call|>",
	"kimi_k2":     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}<|tool_call_end|><|tool_calls_section_end|>",
	"kimi_k3":     "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>{\"city\": \"Paris\", \"days\": 3}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
	"qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
	"glm47":       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
	"laguna":      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
	"longcat": "<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>\n" +
		"<longcat_arg_key>days</longcat_arg_key>\n<longcat_arg_value>3</longcat_arg_value>\n</longcat_tool_call>",
	"minimax_m2": "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n</minimax:tool_call>",
	"muse_spark": "<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">Paris</atem:parameter>\n" +
		"<atem:parameter name=\"days\">3</atem:parameter>\n</atem:invoke>\n</atem:function_calls>",
	"minicpm5":       "<function name=\"get_weather\"><param name=\"city\">Paris</param><param name=\"days\">3</param></function>",
	"pythonic":       "<|tool_call_start|>[get_weather(city=\"Paris\", days=3)]<|tool_call_end|>",
	"gemma4":         "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>",
	"function_gemma": "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>",
}

// matches reports whether a grammar, compiled by llguidance for a
// vocabulary, takes a text as a whole reply.
func matches(t *testing.T, v *constrain.Vocab, tok *tokenizer.Pretrained, grammar, text string) bool {
	t.Helper()
	g, err := v.Lark(grammar)
	require.NoError(t, err, grammar)
	defer g.Free()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	for _, id := range tok.Encode(text, false) {
		if m.Accept(id) != nil {
			return false
		}
	}
	return m.Accepting()
}

// TestGrammarsMatch compiles every format's grammars with llguidance
// (package constrain) on Qwen3's vocabulary, and checks each takes a call
// of its format, after reasoning where it allows that, that the parser
// reads back; and refuses one whose arguments break the schema, or a
// second call where one is asked for.
func TestGrammarsMatch(t *testing.T) {
	folder, err := reftest.Folder("qwen3")
	require.NoError(t, err)
	tok, err := tokenizer.Load(folder)
	require.NoError(t, err)
	v, err := constrain.NewVocab(tok, nil)
	require.NoError(t, err)
	defer v.Free()
	for _, name := range reply.FormatNames() {
		t.Run(name, func(t *testing.T) {
			f, _ := reply.ByName(name)
			text, ok := grammarReplies[name]
			require.True(t, ok, "no reply for format %s", name)
			p := reply.Spec{Tools: f, Reasoning: think}.NewParser(reply.ParserOptions{Tools: tools})
			got, end := p.Push(text), p.Finish()
			got.Content += end.Content
			got.Calls = append(got.Calls, end.Calls...)
			require.Equal(t, reply.Delta{Calls: []reply.ToolCall{weatherCall}}, got, text)

			free, err := f.Grammar(tools, "", true, think)
			require.NoError(t, err)
			one, err := f.Grammar(tools, "get_weather", false, nil)
			require.NoError(t, err)
			other, err := f.Grammar(tools, "search", false, nil)
			require.NoError(t, err)
			open, err := f.Grammar(tools, "", false, &reply.Reasoning{End: "</think>"})
			require.NoError(t, err)
			reply := text

			assert.True(t, matches(t, v, tok, free, reply), "the grammar refuses %q", reply)
			assert.True(t, matches(t, v, tok, free, "<think>\nhmm\n</think>\n\n"+reply))
			assert.True(t, matches(t, v, tok, one, reply))
			assert.True(t, matches(t, v, tok, open, "hmm\n</think>\n\n"+reply))
			assert.False(t, matches(t, v, tok, other, reply), "a call of another tool")
			if name != "harmony" && name != "pythonic" && name != "llama3_json" && name != "mistral" {
				// In these the second call needs a separator of its own.
				assert.False(t, matches(t, v, tok, one, reply+reply), "two calls where one is asked for")
			}
			bad := replaceArg(reply)
			assert.False(t, matches(t, v, tok, one, bad), "the grammar takes %q", bad)
		})
	}
}

// replaceArg spells days as a word, which its schema (an integer) does
// not allow.
func replaceArg(reply string) string {
	for _, old := range []string{"\"days\": 3", "days=3", "days:3", ">\n3\n<", ">3<"} {
		if i := strings.Index(reply, old); i >= 0 {
			repl := map[string]string{"\"days\": 3": "\"days\": \"three\"", "days=3": "days=three",
				"days:3": "days:three", ">\n3\n<": ">\nthree\n<", ">3<": ">three<"}[old]
			return reply[:i] + repl + reply[i+len(old):]
		}
	}
	return reply
}

// TestSpecialTokens: a marker that is a special token must be that token,
// not its text spelled out. Mistral's [TOOL_CALLS] and [ARGS] stand here
// for two of Qwen3's special tokens.
func TestSpecialTokens(t *testing.T) {
	folder, err := reftest.Folder("qwen3")
	require.NoError(t, err)
	tok, err := tokenizer.Load(folder)
	require.NoError(t, err)
	v, err := constrain.NewVocab(tok, nil)
	require.NoError(t, err)
	defer v.Free()
	const toolCalls, args = 151644, 151646 // <|im_start|>, <|object_ref_start|>
	require.True(t, tok.IsSpecial(toolCalls) && tok.IsSpecial(args))
	s, err := reply.Detect(reply.Inputs{
		Template: "[TOOL_CALLS]{{ name }}[ARGS]{{ arguments }}",
		SpecialToken: func(s string) (int32, bool) {
			id, ok := map[string]int32{"[TOOL_CALLS]": toolCalls, "[ARGS]": args}[s]
			return id, ok
		},
	})
	require.NoError(t, err)
	g, err := s.Tools.Grammar(tools, "get_weather", false, nil)
	require.NoError(t, err)
	assert.Contains(t, g, `<[151644]> "get_weather" <[151646]>`)
	cg, err := v.Lark(g)
	require.NoError(t, err)
	defer cg.Free()
	accepts := func(ids []int32) bool {
		m, err := cg.NewMatcher()
		require.NoError(t, err)
		defer m.Free()
		for _, id := range ids {
			if m.Accept(id) != nil {
				return false
			}
		}
		return m.Accepting()
	}
	call := append([]int32{toolCalls}, tok.Encode("get_weather", false)...)
	call = append(call, args)
	call = append(call, tok.Encode(`{"city": "Paris", "days": 3}`, false)...)
	assert.True(t, accepts(call))
	assert.False(t, accepts(tok.Encode(`[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}`, false)),
		"the markers spelled as text")
}

// TestGrammarsCompile: the grammars of a tool without parameters and of
// one whose parameters are any object compile, in every format.
func TestGrammarsCompile(t *testing.T) {
	folder, err := reftest.Folder("qwen3")
	require.NoError(t, err)
	tok, err := tokenizer.Load(folder)
	require.NoError(t, err)
	v, err := constrain.NewVocab(tok, nil)
	require.NoError(t, err)
	defer v.Free()
	odd := []reply.Tool{{Name: "now"}, {Name: "any", Parameters: json.RawMessage(`{"type": "object"}`)}}
	for _, name := range reply.FormatNames() {
		f, _ := reply.ByName(name)
		g, err := f.Grammar(odd, "", true, think)
		require.NoError(t, err)
		cg, err := v.Lark(g)
		if assert.NoError(t, err, "%s:\n%s", name, g) {
			cg.Free()
		}
	}
}
