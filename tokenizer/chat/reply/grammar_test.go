package reply

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the grammars under testdata/grammar")

// grammarCases are the grammars each format's golden file holds.
var grammarCases = []struct {
	title     string
	name      string
	parallel  bool
	reasoning *Reasoning
}{
	{"one or more calls of either tool, after an optional reasoning block", "", true, think},
	{"one call of get_weather", "get_weather", false, nil},
	{"one call of search, after the reasoning block the prompt opened", "search", false, &Reasoning{End: "</think>"}},
}

// TestGrammars writes each format's grammars for the test tools and
// compares them with testdata/grammar/FORMAT.lark (go test -update
// rewrites them). Each grammar is checked for form: every rule used is
// defined once, brackets balance, every %json holds valid JSON.
func TestGrammars(t *testing.T) {
	for _, name := range FormatNames() {
		t.Run(name, func(t *testing.T) {
			f, _ := ByName(name)
			var b strings.Builder
			for _, c := range grammarCases {
				g, err := f.Grammar(testTools, c.name, c.parallel, c.reasoning)
				require.NoError(t, err)
				checkLark(t, g)
				b.WriteString("// " + c.title + "\n" + g + "\n")
			}
			golden(t, filepath.Join("testdata", "grammar", name+".lark"), b.String())
		})
	}
}

// TestGrammarSpecialTokens: markers that are special tokens of the
// vocabulary are named by id, the rest spelled; Qwen3's <tool_call> and
// <think> are not special, gpt-oss's and Mistral's markers are.
func TestGrammarSpecialTokens(t *testing.T) {
	in, _ := loadInputs(t, "qwen3")
	s, err := Detect(in)
	require.NoError(t, err)
	g, err := s.Tools.Grammar(testTools[:1], "", false, s.Reasoning)
	require.NoError(t, err)
	checkLark(t, g)
	golden(t, filepath.Join("testdata", "grammar", "qwen3_vocabulary.lark"), g)

	// gpt-oss's special tokens, with the ids of its vocabulary.
	harmonyIDs := map[string]int32{"<|return|>": 200002, "<|constrain|>": 200003, "<|channel|>": 200005,
		"<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008, "<|call|>": 200012}
	s, err = Detect(Inputs{
		Template:     "<|start|>assistant<|channel|>commentary to=functions.{{ name }}<|call|>",
		HasToken:     func(s string) bool { _, ok := harmonyIDs[s]; return ok || s == "<|end|>" },
		SpecialToken: func(s string) (int32, bool) { id, ok := harmonyIDs[s]; return id, ok },
	})
	require.NoError(t, err)
	require.Equal(t, "harmony", s.Tools.Name)
	g, err = s.Tools.Grammar(testTools, "", false, s.Reasoning)
	require.NoError(t, err)
	checkLark(t, g)
	golden(t, filepath.Join("testdata", "grammar", "harmony_vocabulary.lark"), g)

	// Mistral's control tokens, and its v0.3 list of calls.
	mistralIDs := map[string]int32{"[TOOL_CALLS]": 9, "[ARGS]": 32, "[CALL_ID]": 33}
	for _, tmpl := range []string{"[TOOL_CALLS]{{ name }}[ARGS]{{ args }}", "[TOOL_CALLS] {{ tool_calls | tojson }}"} {
		s, err = Detect(Inputs{Template: tmpl, SpecialToken: func(s string) (int32, bool) { id, ok := mistralIDs[s]; return id, ok }})
		require.NoError(t, err)
		g, err = s.Tools.Grammar(testTools, "", true, nil)
		require.NoError(t, err)
		checkLark(t, g)
		assert.Contains(t, g, "<[9]>")
		if s.Tools.variant == "list" {
			assert.Contains(t, g, `<[9]> "["`)
		} else {
			assert.Contains(t, g, `<[9]> "get_weather" <[32]>`)
		}
	}
}

// TestGrammarErrors: a grammar needs tools with usable names, and a named
// tool must be one of them.
func TestGrammarErrors(t *testing.T) {
	f, _ := ByName("json_tools")
	_, err := f.Grammar(nil, "", false, nil)
	assert.ErrorContains(t, err, "format json_tools: a grammar needs at least one tool")
	_, err = f.Grammar(testTools, "nope", false, nil)
	assert.ErrorContains(t, err, `format json_tools: no tool is named "nope"`)
	_, err = f.Grammar([]Tool{{Name: "a b"}}, "", false, nil)
	assert.ErrorContains(t, err, `"a b" cannot be a function's name`)
	_, err = f.Grammar([]Tool{{Name: "a"}, {Name: "a"}}, "", false, nil)
	assert.ErrorContains(t, err, `"a" is named twice`)
	_, err = f.Grammar([]Tool{{Name: "a", Parameters: json.RawMessage(`{`)}}, "", false, nil)
	assert.ErrorContains(t, err, "parameters are not JSON")
	var none *ToolFormat
	_, err = none.Grammar(testTools, "", false, nil)
	assert.Error(t, err)
	// A tool without parameters takes an object; free-form parameters
	// take any keys.
	for _, name := range FormatNames() {
		f, _ := ByName(name)
		g, err := f.Grammar([]Tool{{Name: "now"}, {Name: "any", Parameters: json.RawMessage(`{"type": "object"}`)}}, "", true, nil)
		require.NoError(t, err, name)
		checkLark(t, g)
	}
}

// golden compares text with a file, or writes it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to write it")
	assert.Equal(t, string(want), got, path)
}

var (
	larkRule  = regexp.MustCompile(`^([a-z_][a-z0-9_]*)(\[lazy\])?: (.+)$`)
	larkIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*`)
)

// checkLark checks a grammar's form: each line a comment or a rule, each
// rule defined once, every name a rule uses defined, brackets balanced,
// strings and regexes closed, %json followed by valid JSON.
func checkLark(t *testing.T, g string) {
	t.Helper()
	defined := map[string]bool{}
	used := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(g, "\n"), "\n") {
		if strings.HasPrefix(line, "//") {
			continue
		}
		m := larkRule.FindStringSubmatch(line)
		if !assert.NotNil(t, m, "not a rule: %q", line) {
			continue
		}
		assert.False(t, defined[m[1]], "rule %s defined twice", m[1])
		defined[m[1]] = true
		body := m[3]
		depth := 0
		for i := 0; i < len(body); {
			switch c := body[i]; {
			case c == ' ' || c == '|' || c == '?' || c == '*' || c == '+':
				i++
			case c == '(':
				depth++
				i++
			case c == ')':
				depth--
				assert.GreaterOrEqual(t, depth, 0, line)
				i++
			case c == '"' || c == '/':
				j := i + 1
				for j < len(body) && body[j] != c {
					if body[j] == '\\' {
						j++
					}
					j++
				}
				require.Less(t, j, len(body), "unclosed %c in %q", c, line)
				i = j + 1
			case c == '<':
				j := strings.IndexByte(body[i:], '>')
				require.Greater(t, j, 0, line)
				assert.Regexp(t, `^<\[[0-9]+\]>$`, body[i:i+j+1])
				i += j + 1
			case strings.HasPrefix(body[i:], "%json "):
				d := json.NewDecoder(strings.NewReader(body[i+len("%json "):]))
				var v json.RawMessage
				require.NoError(t, d.Decode(&v), line)
				assert.Equal(t, "object", jsonKind(v), line)
				i += len("%json ") + int(d.InputOffset())
			default:
				id := larkIdent.FindString(body[i:])
				require.NotEmpty(t, id, "unexpected %q in %q", body[i:], line)
				used[id] = true
				i += len(id)
			}
		}
		assert.Equal(t, 0, depth, "brackets in %q", line)
	}
	require.True(t, defined["start"], "no start rule")
	for u := range used {
		assert.True(t, defined[u], "rule %s is used but not defined", u)
	}
}
