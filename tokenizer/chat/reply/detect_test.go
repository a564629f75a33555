package reply

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/chat"
	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// loadInputs reads an npm tokenizer package's files as Detect reads a
// model's.
func loadInputs(t *testing.T, name string) (Inputs, *tokenizer.Pretrained) {
	t.Helper()
	folder, err := reftest.Folder(name)
	require.NoError(t, err)
	p, err := tokenizer.Load(folder)
	require.NoError(t, err)
	return Inputs{
		Template: p.Config.ChatTemplate,
		HasToken: func(s string) bool { _, ok := p.TokenToID(s); return ok },
		SpecialToken: func(s string) (int32, bool) {
			id, ok := p.TokenToID(s)
			return id, ok && p.IsSpecial(id)
		},
	}, p
}

// TestDetectPackages: the chat templates and vocabularies of the npm
// tokenizer packages. Qwen3's template writes Hermes-style JSON calls and
// its vocabulary has <think>; the others have no tools in their templates
// (Llama 3's is the first release's, without tools) and no reasoning.
func TestDetectPackages(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		tools     string
		reasoning *Reasoning
	}{
		{"qwen3", "json_tools", think},
		{"llama3", "", nil},
		{"gemma3", "", nil},
		{"llama2", "", nil},
		{"gpt2", "", nil},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			in, _ := loadInputs(t, tc.pkg)
			s, err := Detect(in)
			require.NoError(t, err)
			if tc.tools == "" {
				assert.Nil(t, s.Tools)
			} else if assert.NotNil(t, s.Tools) {
				assert.Equal(t, tc.tools, s.Tools.Name)
			}
			assert.Equal(t, tc.reasoning, s.Reasoning)
		})
	}
}

// TestQwen3RoundTrip renders a conversation whose assistant turn calls two
// tools with Qwen3's own template, and parses the assistant's text back
// into the same calls; the prompts it renders for the next turn do not
// end in reasoning, with thinking on or off.
func TestQwen3RoundTrip(t *testing.T) {
	in, p := loadInputs(t, "qwen3")
	s, err := Detect(in)
	require.NoError(t, err)
	tmpl, err := chat.Compile(p.Config.ChatTemplate)
	require.NoError(t, err)

	var msgs []any
	require.NoError(t, json.Unmarshal([]byte(`[
		{"role": "user", "content": "Weather in Paris, and search for a < b & c?"},
		{"role": "assistant", "content": "Let me check.", "tool_calls": [
			{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},
			{"type": "function", "function": {"name": "search", "arguments": {"query": "a < b & c", "tags": ["x", "y"]}}}]}]`), &msgs))
	tools := make([]any, len(testTools))
	for i, tl := range testTools {
		tools[i] = map[string]any{"type": "function", "function": map[string]any{"name": tl.Name, "parameters": tl.Parameters}}
	}
	text, err := tmpl.RenderMaps(msgs, chat.Options{Tools: tools})
	require.NoError(t, err)
	const open = "<|im_start|>assistant\n"
	i := strings.LastIndex(text, open)
	require.GreaterOrEqual(t, i, 0, text)
	turn := strings.TrimSuffix(strings.TrimSpace(text[i+len(open):]), "<|im_end|>")

	got := parse(t, s, ParserOptions{Tools: testTools}, splits(turn)["random a"])
	assert.Equal(t, Delta{Reasoning: "", Content: "Let me check.", Calls: []ToolCall{weatherCall, searchCall}}, got, turn)

	for _, thinking := range []bool{true, false} {
		prompt, err := tmpl.RenderMaps(msgs[:1], chat.Options{AddGenerationPrompt: true, Tools: tools,
			Vars: map[string]any{"enable_thinking": thinking}})
		require.NoError(t, err)
		assert.False(t, s.EndsInReasoning(prompt), prompt)
	}
	// A template that opens the reasoning block for the model.
	open2, err := chat.Compile(`{{ '<|im_start|>assistant\n<think>\n' }}`)
	require.NoError(t, err)
	prompt, err := open2.Render(nil, chat.Options{AddGenerationPrompt: true})
	require.NoError(t, err)
	assert.True(t, s.EndsInReasoning(prompt))
}

// TestDetectRules: each format's rule on a snippet of the template that
// shows it, and the vocabulary rules.
func TestDetectRules(t *testing.T) {
	for _, tc := range []struct {
		want, template string
		vocab          []string
	}{
		{"minimax_m2", `{{ '<minimax:tool_call>\n<invoke name="' + tc.name + '">' }}`, nil},
		{"gemma4", `{{ '<|tool_call>call:' + name + '{' }}...{{ '}<tool_call|>' }}`, nil},
		{"function_gemma", `{{ '<start_function_call>call:' + name }}`, nil},
		{"longcat", `<longcat_tool_call>{{ name }}<longcat_arg_key>`, nil},
		{"glm47", `<tool_call>{{ tc.name }}{% for k, v in args %}<arg_key>{{ k }}</arg_key>`, nil},
		{"pythonic", `<|tool_list_start|>{{ tools | tojson }}<|tool_list_end|>`, nil},
		{"qwen3_coder", "{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}", nil},
		{"qwen3_coder", `{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}`, nil},
		{"kimi_k2", `{{ '<|tool_calls_section_begin|>' }}`, nil},
		{"minicpm5", `<function name="{{ name }}"><param name="{{ k }}">`, nil},
		{"mistral", `{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}`, nil},
		{"muse_spark", `<atem:function_calls>`, nil},
		{"harmony", `{{ '<|start|>assistant<|channel|>commentary to=functions.' + name + ' <|constrain|>json<|message|>' + args + '<|call|>' }}`, nil},
		{"deepseek_v32", `<｜DSML｜function_calls>`, nil},
		{"deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json'", nil},
		{"deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['function']['name'] + '<｜tool▁sep｜>'", nil},
		{"json_tools", `{{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}`, nil},
		{"llama3_json", `Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.<|eot_id|>`, nil},
		{"llama3_json", `{{- "<|python_tag|>" + tool_call.name }}<|eot_id|>`, nil},
		{"kimi_k3", "", xtmlTokens},
		{"pythonic", "{{ messages }}", []string{"<|tool_call_start|>", "<|tool_call_end|>"}},
		{"", "{{ messages }}<tool_call>", []string{"<tool_call>"}},
	} {
		vocab := map[string]bool{}
		for _, v := range tc.vocab {
			vocab[v] = true
		}
		s, err := Detect(Inputs{Template: tc.template, HasToken: func(s string) bool { return vocab[s] }})
		require.NoError(t, err)
		if tc.want == "" {
			assert.Nil(t, s.Tools, tc.template)
			continue
		}
		if assert.NotNil(t, s.Tools, tc.template) {
			assert.Equal(t, tc.want, s.Tools.Name, tc.template)
		}
	}

	// Mistral v0.3's template writes a list of calls; later ones name[ARGS].
	s, err := Detect(Inputs{Template: `{{ '[TOOL_CALLS] ' + tool_calls | tojson }}`})
	require.NoError(t, err)
	assert.Equal(t, "list", s.Tools.variant)
	f, _ := ByName("mistral")
	assert.Equal(t, "", f.variant)

	// tool_parser_type names the format outright.
	s, err = Detect(Inputs{ToolParserType: "laguna", Template: `<tool_call>{{ tool_call.name }}`})
	require.NoError(t, err)
	assert.Equal(t, "laguna", s.Tools.Name)
	_, err = Detect(Inputs{ToolParserType: "hermes2"})
	assert.ErrorContains(t, err, `tool_parser_type "hermes2": unknown format`)
}

// TestDetectReasoning: reasoning markers from the vocabulary, or from the
// template where the vocabulary is unknown.
func TestDetectReasoning(t *testing.T) {
	for _, tc := range []struct {
		vocab    []string
		template string
		want     *Reasoning
	}{
		{[]string{"<think>", "</think>"}, "", think},
		{[]string{"<think>"}, "<think></think>", nil},
		{[]string{"<longcat_think>", "</longcat_think>"}, "", &Reasoning{"<longcat_think>", "</longcat_think>"}},
		{[]string{"<|think:start|>", "<|think:end|>"}, "", &Reasoning{"<|think:start|>", "<|think:end|>"}},
		{[]string{"<|channel>", "<channel|>"}, "", &gemmaThought},
		{xtmlTokens, "", &xtmlThink},
		{harmonyTokens, "", &harmonyAnalysis},
		{nil, "{{ '<think>\n' }}{{ '</think>' }}", think},
		{nil, "<|start|>assistant<|channel|>analysis<|message|>{{ thinking }}<|end|>", &harmonyAnalysis},
		{nil, "{{ messages }}", nil},
	} {
		in := Inputs{Template: tc.template}
		if tc.vocab != nil {
			vocab := map[string]bool{}
			for _, v := range tc.vocab {
				vocab[v] = true
			}
			in.HasToken = func(s string) bool { return vocab[s] }
		}
		s, err := Detect(in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, s.Reasoning, "%v %q", tc.vocab, tc.template)
	}
}

// TestFormatNames: every format has a name ByName finds, and FormatNames
// lists each once, sorted.
func TestFormatNames(t *testing.T) {
	names := FormatNames()
	assert.Len(t, names, len(formats))
	assert.IsIncreasing(t, names)
	for _, n := range names {
		f, ok := ByName(n)
		require.True(t, ok)
		assert.Equal(t, n, f.Name)
	}
	_, ok := ByName("nope")
	assert.False(t, ok)
}
