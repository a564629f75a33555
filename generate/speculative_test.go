package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/generated/llama"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// loadAt loads a model directory of the parity checkpoints.
func loadAt(t *testing.T, dir string) nn.Model {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	require.NoError(t, err, "make parity-models derives the levels")
	t.Cleanup(m.Free)
	return m
}

// collect runs Tokens and returns the tokens and stats.
func collect(t *testing.T, m Model, prompt []int32, opts Options) ([]int32, Stats) {
	t.Helper()
	var out []int32
	st, err := Tokens(context.Background(), m, prompt, opts, func(id int32) error {
		out = append(out, id)
		return nil
	})
	require.NoError(t, err)
	return out, st
}

// TestSpeculativeGreedyIsTheModels: with a draft model, greedy decoding
// gives the model's own tokens, whatever the draft (the same checkpoint
// quantized to 4 bits, which the model mostly agrees with, or another
// architecture's random weights, which it mostly rejects) and however many
// tokens it drafts; a token budget and a stop token end it where they end
// the model alone, and both models' caches then hold the same tokens.
func TestSpeculativeGreedyIsTheModels(t *testing.T) {
	target := loadAt(t, modelDir)
	drafts := map[string]nn.Model{
		"q4_level": loadAt(t, "../out/parity/llama/base/q4_g32"),
		"other":    loadAt(t, "../testdata/parity/qwen3/base/model"),
	}
	prompt := []int32{1, 17, 43, 99, 5, 200, 31}
	want, _ := collect(t, target, prompt, Options{MaxTokens: 40})
	for name, d := range drafts {
		for _, k := range []int{1, 3, 6} {
			t.Run(fmt.Sprintf("%s_k%d", name, k), func(t *testing.T) {
				got, st := collect(t, target, prompt, Options{MaxTokens: 40, Draft: d, NumDraft: k})
				assert.Equal(t, want, got)
				assert.Equal(t, FinishLength, st.Finish)
				t.Logf("accepted %d of %d drafts (%.0f%%)", st.Accepted, st.Drafted, 100*st.AcceptRate())
				assert.Positive(t, st.Drafted)
				if name == "q4_level" {
					// its first drafts mostly agree, later ones less
					assert.Greater(t, st.AcceptRate(), 0.3, "the quantized checkpoint agrees with its own float32")
				}
			})
		}
	}
	t.Run("lookup", func(t *testing.T) {
		// a prompt that repeats itself, so that its n-grams come again
		rep := []int32{1, 17, 43, 99, 5, 17, 43, 99, 5, 17, 43}
		want, _ := collect(t, target, rep, Options{MaxTokens: 40})
		for _, n := range []int{1, 3} {
			got, st := collect(t, target, rep, Options{MaxTokens: 40, Lookup: n, NumDraft: 4})
			assert.Equal(t, want, got, "n-grams of %d", n)
			assert.Positive(t, st.Drafted, "n-grams of %d", n)
			t.Logf("lookup %d: accepted %d of %d drafts", n, st.Accepted, st.Drafted)
		}
	})
	t.Run("stop_and_caches", func(t *testing.T) {
		stopAt := want[11]
		i := slices.Index(want, stopAt)
		caches, dcaches := target.NewCaches(), drafts["q4_level"].NewCaches()
		defer freeAll(caches)
		defer freeAll(dcaches)
		got, st := collect(t, target, prompt, Options{MaxTokens: 40, StopTokens: []int32{stopAt}, Draft: drafts["q4_level"],
			NumDraft: 4, Caches: caches, DraftCaches: dcaches})
		assert.Equal(t, want[:i], got)
		assert.Equal(t, FinishStop, st.Finish)
		assert.Equal(t, stopAt, st.StopToken)
		// the prompt and the tokens passed on, then the stop token at most
		assert.LessOrEqual(t, caches[0].Offset(), len(prompt)+i+1)
		assert.GreaterOrEqual(t, caches[0].Offset(), len(prompt)+i-1)
		assert.Equal(t, caches[0].Offset(), dcaches[0].Offset(), "both models' caches hold the same tokens")
		// and generation goes on from them as the model alone goes on
		// after the same tokens
		full := append(append(slices.Clone(prompt), want[:i]...), stopAt, 7)
		held := caches[0].Offset()
		next := full[held]
		more, _ := collect(t, target, []int32{next}, Options{MaxTokens: 5, Draft: drafts["q4_level"], Caches: caches, DraftCaches: dcaches})
		alone, _ := collect(t, target, full[:held+1], Options{MaxTokens: 5})
		assert.Equal(t, alone, more)
	})
}

func freeAll(caches []kv.Cache) {
	for _, c := range caches {
		c.Free()
	}
}

// bigVocab is a random llama of modelDir's config with 300 tokens, more
// than its 256.
func bigVocab(t *testing.T) nn.Model {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(modelDir, "config.json"))
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(b, &cfg))
	cfg["vocab_size"] = 300
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	return nntest.Model(t, llama.Arch, b, 5)
}

// TestSpeculativeRefusals: what speculative decoding cannot do is refused
// before anything runs, naming why.
func TestSpeculativeRefusals(t *testing.T) {
	target := loadAt(t, modelDir)
	draft := loadAt(t, "../testdata/parity/qwen3/base/model")
	sliding := loadAt(t, "../testdata/parity/llama/sliding/model")
	bigVocab := bigVocab(t)
	prompt := []int32{1, 2, 3}
	for _, c := range []struct {
		name string
		m    Model
		opts Options
		want string
	}{
		{"penalty", target, Options{Draft: draft, Sampling: Sampling{RepetitionPenalty: 1.2}}, "speculative decoding with a repetition penalty is not supported"},
		{"draft tokens", target, Options{Draft: draft, NumDraft: -1}, "draft tokens -1: want at least 1"},
		{"sliding window", sliding, Options{Draft: draft}, "the model's layer"},
		{"sliding draft", target, Options{Draft: sliding}, "the draft model's layer"},
	} {
		_, err := Tokens(context.Background(), c.m, prompt, c.opts, func(int32) error { return nil })
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	require.Greater(t, bigVocab.Info().VocabSize, target.Info().VocabSize)
	_, err := Tokens(context.Background(), target, prompt, Options{Draft: bigVocab}, func(int32) error { return nil })
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), fmt.Sprintf("the draft model's vocabulary of %d tokens is larger than the model's %d", bigVocab.Info().VocabSize, target.Info().VocabSize))
	}
}

// TestSpeculativeSmallerDraftVocab: a draft model whose embedding has fewer
// rows than the model's (as Qwen2.5-0.5B's 151,936 beside Qwen2.5-7B's
// 152,064: one tokenizer, padded differently) drafts for it: greedy gives
// the model's own tokens, and sampled drafts are checked against the
// model's whole vocabulary (the tokens past the draft's have no mass under
// the draft's distribution).
func TestSpeculativeSmallerDraftVocab(t *testing.T) {
	target := bigVocab(t)
	draft := loadAt(t, modelDir)
	require.Greater(t, target.Info().VocabSize, draft.Info().VocabSize)
	prompt := []int32{1, 17, 43, 99, 5}
	want, _ := collect(t, target, prompt, Options{MaxTokens: 24})
	got, st := collect(t, target, prompt, Options{MaxTokens: 24, Draft: draft, NumDraft: 3})
	assert.Equal(t, want, got)
	assert.Positive(t, st.Drafted)
	sampled, st := collect(t, target, prompt, Options{MaxTokens: 24, Draft: draft, NumDraft: 3, Sampling: Sampling{Temp: 1, Seed: 3}})
	assert.Len(t, sampled, 24)
	assert.Positive(t, st.Drafted)
}

// TestSpeculativeSamplingDistribution: sampled with a draft model that
// disagrees with the model (another architecture's random weights), the
// first two tokens are distributed as the model's own draws: a
// two-sample chi-square test of 1,500 seeded runs each way, over the pairs
// of tokens, passes at the 0.1% level (the seeds are fixed, so the test
// is deterministic). Accepting every draft fails it; the residual's
// draw, which this pair seldom reaches, is TestAcceptDraws'.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	target := loadAt(t, modelDir)
	draft := loadAt(t, "../testdata/parity/qwen3/base/model")
	prompt := []int32{1, 17, 43}
	const n = 1500
	sampling := Sampling{Temp: 1, TopK: 6}
	count := func(spec bool) map[[2]int32]int {
		out := map[[2]int32]int{}
		for seed := range uint64(n) {
			opts := Options{MaxTokens: 2, Sampling: sampling}
			opts.Seed = seed + 1
			if spec {
				opts.Draft, opts.NumDraft = draft, 2
			}
			got, _ := collect(t, target, prompt, opts)
			require.Len(t, got, 2)
			out[[2]int32{got[0], got[1]}]++
		}
		return out
	}
	alone, spec := count(false), count(true)
	checkSame(t, alone, spec)
}

// TestLookupSamplingDistribution: TestSpeculativeSamplingDistribution
// for prompt lookup's drafts (drawn with certainty), on a prompt that
// repeats itself so that they come.
func TestLookupSamplingDistribution(t *testing.T) {
	target := loadAt(t, modelDir)
	prompt := []int32{5, 6, 7, 5, 6, 7, 5, 6}
	const n = 1500
	count := func(lookup int) map[[2]int32]int {
		out := map[[2]int32]int{}
		for seed := range uint64(n) {
			opts := Options{MaxTokens: 2, Sampling: Sampling{Temp: 1, TopK: 6, Seed: seed + 1}, Lookup: lookup, NumDraft: 2}
			got, st := collect(t, target, prompt, opts)
			require.Len(t, got, 2)
			if lookup > 0 {
				require.Positive(t, st.Drafted)
			}
			out[[2]int32{got[0], got[1]}]++
		}
		return out
	}
	checkSame(t, count(0), count(2))
}

// checkSame is a two-sample chi-square test of a and b at the 0.1% level.
func checkSame(t *testing.T, a, b map[[2]int32]int) {
	t.Helper()
	stat, df := chiSquare2(a, b, 5)
	// the 0.999 quantile of chi-square with df degrees of freedom
	// (Wilson-Hilferty approximation)
	z := 3.090
	crit := float64(df) * math.Pow(1-2/(9*float64(df))+z*math.Sqrt(2/(9*float64(df))), 3)
	t.Logf("chi-square %.1f on %d degrees of freedom (critical %.1f)", stat, df, crit)
	assert.Less(t, stat, crit)
}

// TestLookup: prompt lookup drafts what followed the most recent earlier
// occurrence of the longest tail it finds.
func TestLookup(t *testing.T) {
	for _, c := range []struct {
		seen []int32
		k, n int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3}, 3, 3, []int32{4, 9, 1}},
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3}, 9, 3, []int32{4, 9, 1, 2, 3}},
		{[]int32{7, 8, 5, 2, 3, 6, 1, 2, 3}, 2, 3, []int32{6, 1}}, // "2 3" (no earlier "1 2 3")
		{[]int32{3, 5, 3, 6, 3}, 2, 2, []int32{6, 3}},             // the most recent "3"
		{[]int32{1, 2, 3}, 2, 3, nil},                             // nothing came before
		{[]int32{4, 4, 4}, 3, 1, []int32{4}},
		{[]int32{1, 2, 1}, 0, 2, nil},
	} {
		assert.Equal(t, c.want, lookup(c.seen, c.k, c.n), "%v", c.seen)
	}
}

// chiSquare2 is the two-sample chi-square statistic of two counts over the
// same categories (those with fewer than min in both pooled into one) and
// its degrees of freedom.
func chiSquare2(a, b map[[2]int32]int, min int) (float64, int) {
	keys := map[[2]int32]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var cats [][2]int
	rest := [2]int{}
	sorted := make([][2]int32, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i][0]*1000+sorted[i][1] < sorted[j][0]*1000+sorted[j][1] })
	for _, k := range sorted {
		if a[k]+b[k] < 2*min {
			rest[0] += a[k]
			rest[1] += b[k]
			continue
		}
		cats = append(cats, [2]int{a[k], b[k]})
	}
	if rest[0]+rest[1] > 0 {
		cats = append(cats, rest)
	}
	na, nb := 0, 0
	for _, c := range cats {
		na += c[0]
		nb += c[1]
	}
	stat := 0.0
	for _, c := range cats {
		tot := float64(c[0] + c[1])
		ea := tot * float64(na) / float64(na+nb)
		eb := tot * float64(nb) / float64(na+nb)
		stat += (float64(c[0])-ea)*(float64(c[0])-ea)/ea + (float64(c[1])-eb)*(float64(c[1])-eb)/eb
	}
	return stat, len(cats) - 1
}

// TestAcceptDraws: a draft drawn from q and checked against p by
// acceptDraws gives tokens distributed as p, for distributions that
// overlap in part (q puts mass where p puts none, and the other way
// round): 400,000 draws, each token's share within 5 standard errors of p.
// Keeping every draft gives q; replacing a rejected draft by a draw from p
// instead of the residual gives neither.
func TestAcceptDraws(t *testing.T) {
	p := []float64{0.5, 0.3, 0.2, 0, 0}
	q := []float64{0.1, 0.2, 0.3, 0.25, 0.15}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 400000
	counts := make([]int, len(p))
	kept := 0
	for range n {
		d := draw(q, rng)
		k, tok, err := acceptDraws(func(int) ([]float64, error) { return p, nil }, []int32{d}, [][]float64{q}, rng)
		require.NoError(t, err)
		if k == 1 {
			kept++
			tok = d
		}
		counts[tok]++
	}
	for i, want := range p {
		got := float64(counts[i]) / n
		se := math.Sqrt(want*(1-want)/n) + 1e-9
		assert.InDelta(t, want, got, 5*se+1e-6, "token %d", i)
	}
	// the share kept is the overlap, sum of min(p, q)
	overlap := 0.0
	for i := range p {
		overlap += math.Min(p[i], q[i])
	}
	assert.InDelta(t, overlap, float64(kept)/n, 0.005)
}
