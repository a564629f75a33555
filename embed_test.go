package archgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/internal/tinychat"
	"github.com/archgen/archgen/runtime/mlx"
)

// embedInputs are the texts the reference test embeds: one token, a
// sentence, one longer than the sliding window of the parity cases (6),
// and non-ASCII text.
var embedInputs = []string{
	"a",
	"Hello, world!",
	"The quick brown fox jumps over the lazy dog, twice over.",
	"Embeddings pool the final hidden states: ünïcödé, 日本語.",
}

// embedRef is what testdata/embeddings/ref.py prints.
type embedRef struct {
	Tokens [][]int32              `json:"tokens"`
	Last   map[string][][]float64 `json:"last"` // by form: raw, normalized, truncated
	Mean   map[string][][]float64 `json:"mean"`
}

// embedJob is one checkpoint for testdata/embeddings/ref.py: texts its
// tokenizer encodes, or token ids.
type embedJob struct {
	Model      string    `json:"model"`
	Inputs     []string  `json:"inputs,omitempty"`
	IDs        [][]int32 `json:"ids,omitempty"`
	Dimensions int       `json:"dimensions"`
	Float32    bool      `json:"float32"`
}

// mlxlmEmbeddings runs testdata/embeddings/ref.py on jobs, in one process.
func mlxlmEmbeddings(t *testing.T, jobs []embedJob) []embedRef {
	t.Helper()
	var refs []embedRef
	runReference(t, "testdata/embeddings/ref.py", jobs, &refs)
	require.Len(t, refs, len(jobs))
	return refs
}

// runReference runs a reference script of the project's venv with jobs as
// JSON on its standard input, and decodes what it prints into replies.
func runReference(t *testing.T, script string, jobs, replies any) {
	t.Helper()
	py, err := filepath.Abs(".deps/py/bin/python")
	require.NoError(t, err)
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	req, _ := json.Marshal(jobs)
	cmd := exec.Command(py, script)
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", script, stderr.String())
	require.NoError(t, json.Unmarshal(out, replies))
}

// maxDiff is the largest absolute difference of got and want, row by row,
// divided by the largest absolute value of want's row (1 for unit
// vectors).
func maxDiff(t *testing.T, got [][]float32, want [][]float64, relative bool) float64 {
	t.Helper()
	require.Len(t, got, len(want))
	worst := 0.0
	for i := range want {
		require.Len(t, got[i], len(want[i]), "row %d", i)
		scale := 1.0
		if relative {
			scale = 0
			for _, w := range want[i] {
				scale = math.Max(scale, math.Abs(w))
			}
		}
		for j, w := range want[i] {
			worst = math.Max(worst, math.Abs(float64(got[i][j])-w)/scale)
		}
	}
	return worst
}

// compareEmbeddings holds m's embeddings of inputs to mlx-lm's on dir
// within tol (of each vector's scale), at both poolings, normalized,
// raw and truncated to dims, and returns the largest difference.
func compareEmbeddings(t *testing.T, m *archgen.Model, ref embedRef, inputs []string, dims int, tol float64) float64 {
	t.Helper()
	ids := make([][]int32, len(inputs))
	for i, s := range inputs {
		var err error
		ids[i], err = m.EncodeEmbedInput(s)
		require.NoError(t, err)
		require.Equal(t, ref.Tokens[i], ids[i], "the tokens of input %d", i)
	}
	got, err := m.Embed(context.Background(), inputs, archgen.EmbedOptions{})
	require.NoError(t, err)
	want, err := m.EmbedTokens(context.Background(), ids, archgen.EmbedOptions{})
	require.NoError(t, err)
	require.Equal(t, want, got, "Embed against EmbedTokens of its encoding")
	return compareTokenEmbeddings(t, m, ref, ids, dims, tol)
}

// compareTokenEmbeddings is compareEmbeddings on token ids.
func compareTokenEmbeddings(t *testing.T, m *archgen.Model, ref embedRef, ids [][]int32, dims int, tol float64) float64 {
	t.Helper()
	ctx := context.Background()
	worst := 0.0
	for _, pooling := range []string{archgen.PoolLast, archgen.PoolMean} {
		want := ref.Last
		if pooling == archgen.PoolMean {
			want = ref.Mean
		}
		for _, c := range []struct {
			name     string
			opts     archgen.EmbedOptions
			relative bool
		}{
			{"normalized", archgen.EmbedOptions{Pooling: pooling}, false},
			{"raw", archgen.EmbedOptions{Pooling: pooling, NoNormalize: true}, true},
			{"truncated", archgen.EmbedOptions{Pooling: pooling, Dimensions: dims}, false},
		} {
			got, err := m.EmbedTokens(ctx, ids, c.opts)
			require.NoError(t, err)
			d := maxDiff(t, got, want[c.name], c.relative)
			t.Logf("%s %s: max difference %.2e", pooling, c.name, d)
			assert.LessOrEqual(t, d, tol, "%s %s", pooling, c.name)
			worst = math.Max(worst, d)
		}
	}
	return worst
}

// TestEmbedMatchesMLXLM: Embed's vectors are mlx-lm's inner model's final
// hidden states (model.model, before the head), pooled and normalized as
// testdata/embeddings/ref.py does in numpy, on the parity checkpoints of
// llama, qwen3 and gemma3_text (sliding layers with a window shorter than
// the longest input) with the tiny chat tokenizer, whose encoding must be
// transformers' too.
func TestEmbedMatchesMLXLM(t *testing.T) {
	cases := []struct{ arch, cas string }{{"llama", "base"}, {"qwen3", "base"}, {"gemma3_text", "base"}}
	var jobs []embedJob
	for _, c := range cases {
		dir := filepath.Join(t.TempDir(), c.arch)
		require.NoError(t, tinychat.WriteParity(dir, c.arch, c.cas, nil, nil))
		jobs = append(jobs, embedJob{Model: dir, Inputs: embedInputs, Dimensions: 16})
	}
	refs := mlxlmEmbeddings(t, jobs)
	for i, c := range cases {
		t.Run(c.arch, func(t *testing.T) {
			m := load(t, jobs[i].Model)
			// float32 checkpoints, computed in float32 by both: the
			// float32 level's tolerance of the parity matrix.
			d := compareEmbeddings(t, m, refs[i], embedInputs, 16, 1e-4)
			t.Logf("%s/%s: largest difference from mlx-lm %.2e", c.arch, c.cas, d)
		})
	}
}

// TestEmbedSmolLM2MatchesMLXLM: the real checkpoint, read from its GGUF
// file, against mlx-lm on the model directory gguf.WriteDir makes of it
// (the same quantized weights, computed in float32 by both).
func TestEmbedSmolLM2MatchesMLXLM(t *testing.T) {
	if _, err := os.Stat(smolLM2); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	g, err := gguf.Read(smolLM2, nil, registry.Archs())
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "model")
	err = g.WriteDir(dir)
	g.Free()
	require.NoError(t, err)
	ref := mlxlmEmbeddings(t, []embedJob{{Model: dir, Inputs: embedInputs, Dimensions: 64, Float32: true}})[0]
	m := load(t, smolLM2)
	// As gguf's TestRealCheckpoint: float32 sums in another order, 1e-4
	// of the scale; where the 4-bit products round x to 16 bits per group
	// of W, 1e-3.
	tol := 1e-4
	if mlx.NativeQMV16() {
		tol = 1e-3
	}
	d := compareEmbeddings(t, m, ref, embedInputs, 64, tol)
	t.Logf("SmolLM2-135M-Instruct Q4_1: largest difference from mlx-lm %.2e", d)
}

// TestHiddenMatchesMLXLM: every architecture's Hidden is mlx-lm's inner
// model (a wrapper's text model's; model, backbone or transformer, as
// testdata/embeddings/ref.py finds it), pooled both ways, on the float32
// checkpoint of the first parity case of each: mixtures of experts,
// hybrids and recurrent models, tied heads, and heads that scale, divide
// or soft-cap their logits (which Hidden leaves out). The inputs are the
// case's prompt (longer than its sliding window) and a two-token one.
func TestHiddenMatchesMLXLM(t *testing.T) {
	var index struct {
		Cases []struct{ Arch, Case string } `json:"cases"`
	}
	data, err := os.ReadFile("testdata/parity/index.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &index))
	type one struct{ arch, cas, dir string }
	var cases []one
	var jobs []embedJob
	seen, archs := map[string]bool{}, map[string]bool{}
	for _, c := range index.Cases {
		archs[c.Arch] = true
		if seen[c.Arch] {
			continue
		}
		dir := filepath.Join("testdata/parity", c.Arch, c.Case, "model")
		var refs struct {
			Prompt []int32 `json:"prompt"`
		}
		data, err := os.ReadFile(filepath.Join("testdata/parity", c.Arch, c.Case, "refs.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &refs))
		var cfg struct {
			Context int `json:"max_position_embeddings"`
		}
		data, err = os.ReadFile(filepath.Join(dir, "config.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &cfg))
		if cfg.Context > 0 && cfg.Context < len(refs.Prompt) {
			continue // a case whose prompt runs past its context (a dynamic rope's): Embed refuses it
		}
		seen[c.Arch] = true
		cases = append(cases, one{c.Arch, c.Case, dir})
		jobs = append(jobs, embedJob{Model: dir, IDs: [][]int32{refs.Prompt, {3, 9}}, Dimensions: 16})
	}
	require.Equal(t, len(archs), len(seen), "an architecture without a case to embed")
	refs := mlxlmEmbeddings(t, jobs)
	worst := 0.0
	for i, c := range cases {
		t.Run(c.arch+"/"+c.cas, func(t *testing.T) {
			m, err := archgen.Load(context.Background(), c.dir, archgen.LoadOptions{NoTokenizer: true})
			require.NoError(t, err)
			defer m.Free()
			d := compareTokenEmbeddings(t, m, refs[i], jobs[i].IDs, 16, 1e-4)
			t.Logf("%s/%s: largest difference from mlx-lm %.2e", c.arch, c.cas, d)
			worst = math.Max(worst, d)
		})
	}
	t.Logf("every architecture: largest difference from mlx-lm %.2e", worst)
}

// TestEmbedChunked: an input run in chunks over a KV cache gives the
// vectors it gives in one piece, on a sliding-window model whose window
// (6) is longer than the chunks.
func TestEmbedChunked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	require.NoError(t, tinychat.WriteParity(dir, "gemma3_text", "base", nil, nil))
	m := load(t, dir)
	ctx := context.Background()
	for _, pooling := range []string{archgen.PoolLast, archgen.PoolMean} {
		whole, err := m.Embed(ctx, embedInputs, archgen.EmbedOptions{Pooling: pooling})
		require.NoError(t, err)
		chunked, err := m.Embed(ctx, embedInputs, archgen.EmbedOptions{Pooling: pooling, PrefillStep: 4})
		require.NoError(t, err)
		wide := make([][]float64, len(whole))
		for i, row := range whole {
			for _, x := range row {
				wide[i] = append(wide[i], float64(x))
			}
		}
		assert.LessOrEqual(t, maxDiff(t, chunked, wide, false), 1e-5, pooling)
	}
}

// TestEmbedRefusals: bad options and inputs are refused, naming the
// input; the model's context comes from config.json.
func TestEmbedRefusals(t *testing.T) {
	m := load(t, tinyDir)
	ctx := context.Background()
	hidden := m.Net.Info().Hidden
	_, err := m.Embed(ctx, []string{"x"}, archgen.EmbedOptions{Pooling: "max"})
	assert.EqualError(t, err, `embed: pooling "max": want one of ["last" "mean" "cls"]`)
	_, err = m.Embed(ctx, []string{"x"}, archgen.EmbedOptions{Dimensions: hidden + 1})
	assert.EqualError(t, err, "embed: dimensions 65: want 1 to the vectors' size, 64 (0: all)")
	_, err = m.Embed(ctx, []string{"x"}, archgen.EmbedOptions{Dimensions: -1})
	assert.ErrorContains(t, err, "embed: dimensions -1")

	assert.Equal(t, 2048, m.ContextLength())
	long := make([]int32, 2049)
	_, err = m.EmbedTokens(ctx, [][]int32{{1}, {2}, long}, archgen.EmbedOptions{})
	var ie *archgen.EmbedInputError
	require.True(t, errors.As(err, &ie), "%v", err)
	assert.Equal(t, 2, ie.Index)
	assert.Equal(t, 2048, ie.Context)
	assert.EqualError(t, err, "input[2]: 2049 tokens, more than the model's context of 2048")
	_, err = m.EmbedTokens(ctx, [][]int32{{1}, {}}, archgen.EmbedOptions{})
	assert.EqualError(t, err, "input[1]: no tokens: an input needs at least one")
	_, err = m.EmbedTokens(ctx, [][]int32{{1, 256}}, archgen.EmbedOptions{})
	assert.EqualError(t, err, "input[0]: token 256 (position 1) is outside the vocabulary of 256")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Embed(cancelled, []string{"x"}, archgen.EmbedOptions{})
	assert.ErrorIs(t, err, context.Canceled)

	// Dimensions keeps the first values of the vector, renormalized.
	full, err := m.Embed(ctx, []string{"hi"}, archgen.EmbedOptions{NoNormalize: true})
	require.NoError(t, err)
	cut, err := m.Embed(ctx, []string{"hi"}, archgen.EmbedOptions{Dimensions: 8})
	require.NoError(t, err)
	require.Len(t, cut[0], 8)
	var ss float64
	for _, x := range full[0][:8] {
		ss += float64(x) * float64(x)
	}
	for i := range cut[0] {
		assert.InDelta(t, float64(full[0][i])/math.Sqrt(ss), cut[0][i], 1e-6)
	}
}

// TestEmbedPackedMatchesAlone: inputs of many lengths embedded in one call
// (run together in packs, each padded to its pack's longest) equal each
// input embedded alone, both poolings, on a dense model, one with sliding
// windows shorter than the inputs, a mixture of experts and recurrent
// hybrids: the padding after an input's end changes none of its states.
func TestEmbedPackedMatchesAlone(t *testing.T) {
	var ids [][]int32
	for i, n := range []int{1, 2, 5, 9, 9, 17, 30, 44, 3, 12} {
		in := make([]int32, n)
		for j := range in {
			in[j] = int32((7*i + 13*j + 1) % 97)
		}
		ids = append(ids, in)
	}
	ctx := context.Background()
	for _, c := range []struct{ arch, cas string }{
		{"llama", "base"}, {"llama", "sliding"}, {"qwen3_moe", "base"}, {"qwen3_next", "base"},
		{"mamba2", "tied_groups"}, {"falcon_h1", "norm_after_gate"}, {"rwkv7", "heads16_untied"},
	} {
		t.Run(c.arch+"/"+c.cas, func(t *testing.T) {
			m, err := archgen.Load(ctx, filepath.Join("testdata/parity", c.arch, c.cas, "model"), archgen.LoadOptions{NoTokenizer: true})
			require.NoError(t, err)
			defer m.Free()
			for _, pooling := range []string{archgen.PoolLast, archgen.PoolMean} {
				opts := archgen.EmbedOptions{Pooling: pooling, NoNormalize: true}
				packed, err := m.EmbedTokens(ctx, ids, opts)
				require.NoError(t, err)
				alone := make([][]float64, len(ids))
				for i, in := range ids {
					v, err := m.EmbedTokens(ctx, [][]int32{in}, opts)
					require.NoError(t, err)
					for _, x := range v[0] {
						alone[i] = append(alone[i], float64(x))
					}
				}
				// float32 sums that kernels block by rows: the parity
				// matrix's float32 tolerance, relative to each vector
				d := maxDiff(t, packed, alone, true)
				t.Logf("%s: largest difference packed vs alone %.2e", pooling, d)
				assert.LessOrEqual(t, d, 1e-4, pooling)
			}
		})
	}
}
