package kv_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/llama"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// loadLevel loads a parity case at a level of quantization or dtype
// ("base/q4_g64"), which make parity-models derives with mlx-lm, to
// compute in dtype (the zero value: the default).
func loadLevel(t *testing.T, arch, caseLevel string, dtype mlx.Dtype) nn.Model {
	t.Helper()
	dir := filepath.Join("../../out/parity", arch, caseLevel)
	m, err := registry.Load(dir, nn.Options{Dtype: dtype})
	if err != nil {
		t.Fatalf("%v (make parity-models derives it)", err)
	}
	t.Cleanup(m.Free)
	return m
}

// loadSmol loads the demo's SmolLM2-135M-Instruct Q4_1 GGUF (make models
// fetches it).
func loadSmol(t *testing.T) nn.Model {
	t.Helper()
	g, err := gguf.Read("../../.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf", nil, registry.Archs())
	if err != nil {
		t.Fatalf("%v (make models fetches it)", err)
	}
	m, err := g.Load(nn.Options{}, registry.Load)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// slidingQuantizable is a random llama (runtime/kv/testdata/sliding_head32.json) with windows of 5 on half
// its layers and a head dim of 32, which KV quantization in groups of 32
// needs (the parity checkpoint with windows has a head dim of 16).
func slidingQuantizable(t testing.TB) nn.Model {
	t.Helper()
	config, err := os.ReadFile("testdata/sliding_head32.json")
	if err != nil {
		t.Fatal(err)
	}
	return nntest.Model(t, llama.Arch, config, 7)
}

// prompts of different lengths, some longer than the sliding windows (6).
func batchPrompts(n int) [][]int32 {
	out := make([][]int32, n)
	for i := range out {
		l := 2 + (i*5)%15
		p := make([]int32, l)
		for j := range p {
			p[j] = int32((i*37 + j*11 + 3) % 250)
		}
		out[i] = p
	}
	return out
}

// decodeSolo runs prompt through fresh caches (all but the last token,
// then the last) and decodes steps greedy tokens, returning them and the
// logits each was picked from.
func decodeSolo(t *testing.T, m nn.Model, opts kv.Options, prompt []int32, steps int) ([]int32, [][]float32) {
	t.Helper()
	caches, err := m.NewCachesWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer freeAll(caches)
	if len(prompt) > 1 {
		run(t, m, caches, prompt[:len(prompt)-1])
	}
	tok := prompt[len(prompt)-1]
	var toks []int32
	var rows [][]float32
	for range steps {
		l := run(t, m, caches, []int32{tok})[0]
		tok = argmax(l)
		toks = append(toks, tok)
		rows = append(rows, l)
	}
	return toks, rows
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// decodeBatched prefills each prompt alone (as decodeSolo), takes its first
// pick there, merges the caches and decodes the rest of the steps for all
// rows at once.
func decodeBatched(t *testing.T, m nn.Model, opts kv.Options, prompts [][]int32, steps int) ([][]int32, [][][]float32) {
	t.Helper()
	B := len(prompts)
	toks := make([][]int32, B)
	rows := make([][][]float32, B)
	per := make([][]kv.Cache, B)
	for i, p := range prompts {
		c, err := m.NewCachesWith(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer freeAll(c)
		if len(p) > 1 {
			run(t, m, c, p[:len(p)-1])
		}
		l := run(t, m, c, p[len(p)-1:])[0]
		toks[i] = append(toks[i], argmax(l))
		rows[i] = append(rows[i], l)
		per[i] = c
	}
	batch := merge(t, per)
	defer freeAll(batch)
	for s := 1; s < steps; s++ {
		in := make([]int32, B)
		for i := range in {
			in[i] = toks[i][s-1]
		}
		for i, l := range stepRows(t, m, batch, in) {
			toks[i] = append(toks[i], argmax(l))
			rows[i] = append(rows[i], l)
		}
	}
	return toks, rows
}

// TestBatchedDecodeMatchesSolo merges sequences of different lengths into
// one batch after their prompts and decodes them together: every row must
// pick the tokens it picks alone, from the very same logits, on growing and
// window caches, dense and quantized, at every weight level; the one
// exception is the kernel noted at its case.
// kernelRounding bounds how far a row's logits in a batch may lie from its
// logits alone: archgen's own CPU kernels (runtime/mlx's linear and
// attention) block their work by the number of rows, so a float32 sum can
// round in another order in a batch (measured: up to 1.7e-5 on these
// checkpoints; with ARCHGEN_MLX_NATIVE_FAST=0 ARCHGEN_MLX_NATIVE_QMM=0,
// libmlx's kernels, every case is exact). It is the parity matrix's
// float32 tolerance; the tokens must still be the very ones picked alone.
const kernelRounding = 1e-4

// halfCacheRounding bounds the same for half-precision checkpoints
// computed in float32, whose caches hold keys and values in the
// checkpoint's half dtype (nn.Params.CacheDtype): a key or value that
// differs in the last float32 place between a row alone and in a batch
// (kernelRounding) may round to the neighbouring half-precision value, a
// step of 2^-8 (bfloat16) of that element. Quantized weights add their own
// difference: archgen's quantized kernel multiplies one or two rows
// straight from the packed weights and more rows from dequantized blocks,
// which round differently, and on AVX-512 it rounds x to 16 bits per group
// (qmv16.h), so an x that differs in the last float32 place upstream may
// land a step away, 1/32767 of its group's largest value (with MLX's
// kernel, ARCHGEN_MLX_NATIVE_QMM=0, and float32 caches the batch is exact
// here too).
const halfCacheRounding = 1e-2

func TestBatchedDecodeMatchesSolo(t *testing.T) {
	cases := []struct {
		arch, cas string
		opts      kv.Options
		tol       float64
	}{
		{"llama", "base", kv.Options{}, 0},
		{"llama", "sliding", kv.Options{}, 0},
		{"mistral", "base", kv.Options{}, 0},
		{"gemma2", "capped", kv.Options{}, 0},
		{"gemma2", "defaults", kv.Options{}, 0},    // grouped heads, written-out attention
		{"llama", "rope_dynamic", kv.Options{}, 0}, // a rope whose base follows each row's length
		{"llama", "rope_yarn", kv.Options{}, 0},
		{"phi3", "longrope_partial", kv.Options{}, 0},
		{"smollm3", "nope_interval", kv.Options{}, 0}, // layers without positions
		{"starcoder2", "base", kv.Options{}, 0},
		{"olmo2", "base", kv.Options{}, 0},
		{"gemma", "base", kv.Options{}, 0},
		{"glm4", "base", kv.Options{}, 0},
		{"granite", "base", kv.Options{}, 0},
		{"qwen2", "base", kv.Options{}, 0},
		{"qwen3", "base", kv.Options{}, 0},
		// later layers attending over earlier layers' keys and values (owner
		// and reader caches over a batch), per-layer inputs
		{"gemma4_text", "shared_kv", kv.Options{}, 0},
		{"gemma4_text", "per_layer_inputs", kv.Options{}, 0},
		{"gemma4_text", "moe_beside", kv.Options{}, 0}, // experts routed per row beside the dense MLP
		// Keys that differ in the last float32 place (kernelRounding) may fall
		// into another quantization step.
		{"llama", "base", kv.Options{KVBits: 8, KVGroupSize: 32}, 1e-2},
		{"llama", "base", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
		{"mistral", "base", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
		// The levels in their checkpoints' own arithmetic (bfloat16), as
		// mlx-lm computes them.
		{"llama", "base/q4_g64@checkpoint", kv.Options{}, 0},
		// bfloat16 activations: a sum rounded in another order moves a logit
		// by one bfloat16 step (0.125 at these magnitudes).
		{"llama", "base/q8_g32@checkpoint", kv.Options{}, 0.125},
		{"llama", "base/bfloat16@checkpoint", kv.Options{}, 0},
		{"llama", "sliding/q4_g64@checkpoint", kv.Options{}, 0},
		// At the default float32 compute: a bfloat16 weight read as stored
		// is widened exactly, so the dense level over float32 caches is
		// exact as float32 is; over its default bfloat16 caches, a key or
		// value that differs in the last float32 place between the
		// products of one row and of many may round to the neighbouring
		// bfloat16 value, a step of 2^-8 of that element, as the quantized
		// products' steps below; the quantized products take the kernels'
		// other rounding for more rows, as the real checkpoint below
		// (whose float16 scales make float16 caches).
		{"llama", "base/bfloat16", kv.Options{Dtype: mlx.Float32}, 0},
		{"llama", "base/bfloat16", kv.Options{}, halfCacheRounding},
		{"llama", "base/q4_g64", kv.Options{}, halfCacheRounding},
		{"llama", "sliding/q4_g64", kv.Options{}, halfCacheRounding},
		// The real checkpoint of make demo, in llama.cpp's Q4_1 and computed in
		// float32.
		{"smollm2", "q4_1", kv.Options{}, halfCacheRounding},
		{"random", "sliding", kv.Options{KVBits: 8, KVGroupSize: 32}, 0},
		{"random", "sliding", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
	}
	const steps = 12
	for _, c := range cases {
		// 2 rows: also the KV heads of the grouped cases, where a mask
		// broadcast over the wrong axis would go unnoticed.
		sizes := []int{16, 2}
		if c.arch == "smollm2" {
			// More than 2 rows take the other kernel; 16 rows of the real
			// checkpoint would add minutes on 2 cores.
			sizes = []int{4}
		}
		for _, B := range sizes {
			name := fmt.Sprintf("%s_%s_kv%d", c.arch, strings.ReplaceAll(c.cas, "/", "_"), c.opts.KVBits)
			if c.opts.Dtype != 0 {
				name += "_" + c.opts.Dtype.String()
			}
			t.Run(fmt.Sprintf("%s_B%d", name, B), func(t *testing.T) {
				var m nn.Model
				if c.arch == "random" {
					m = slidingQuantizable(t)
				} else if c.arch == "smollm2" {
					m = loadSmol(t)
				} else if cas, ok := strings.CutSuffix(c.cas, "@checkpoint"); ok {
					m = loadLevel(t, c.arch, cas, nn.CheckpointDtype)
				} else if strings.Contains(c.cas, "/") {
					m = loadLevel(t, c.arch, c.cas, 0)
				} else {
					m = load(t, c.arch, c.cas)
				}
				prompts := batchPrompts(B)
				bt, bl := decodeBatched(t, m, c.opts, prompts, steps)
				worst := 0.0
				for i, p := range prompts {
					st, sl := decodeSolo(t, m, c.opts, p, steps)
					for s := range st {
						for k := range sl[s] {
							worst = max(worst, math.Abs(float64(sl[s][k]-bl[i][s][k])))
						}
					}
					if fmt.Sprint(st) != fmt.Sprint(bt[i]) {
						t.Errorf("row %d (prompt of %d): batched %v, alone %v", i, len(p), bt[i], st)
					}
				}
				t.Logf("largest logit difference batched vs alone: %g", worst)
				tol := max(c.tol, kernelRounding)
				if worst > tol {
					t.Errorf("logits differ from the sequences' own by up to %g (allowed %g)", worst, tol)
				}
			})
		}
	}
}

// prefill is fresh caches of m (made as opts says) after tokens.
func prefill(t *testing.T, m nn.Model, opts kv.Options, tokens []int32) []kv.Cache {
	t.Helper()
	c, err := m.NewCachesWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m, c, tokens)
	return c
}

// merge batches per-sequence caches layer by layer.
func merge(t *testing.T, per [][]kv.Cache) []kv.Cache {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	out := make([]kv.Cache, len(per[0]))
	for j := range out {
		col := make([]kv.Cache, len(per))
		for i := range per {
			col[i] = per[i][j]
		}
		b, err := kv.Merge(g, col)
		if err != nil {
			t.Fatal(err)
		}
		out[j] = b
	}
	return out
}

// stepRows feeds one token per row and returns each row's logits.
func stepRows(t *testing.T, m nn.Model, caches []kv.Cache, in []int32) [][]float32 {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	logits := g.AsType(m.Forward(g, mlx.FromSlice(g, in, len(in), 1), caches), mlx.Float32)
	if err := g.Eval(logits); err != nil {
		t.Fatal(err)
	}
	v, err := logits.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	vocab := len(v) / len(in)
	out := make([][]float32, len(in))
	for i := range out {
		out[i] = v[i*vocab : (i+1)*vocab]
	}
	return out
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestBatchedLeaveJoinExtract: rows leave (Filter) and join (Extend) a
// running batch, and a row taken out (Extract) goes on alone; through all
// of it every row sees the very logits it sees alone.
func TestBatchedLeaveJoinExtract(t *testing.T) {
	for _, c := range []struct {
		cas  string
		opts kv.Options
		tol  float64
	}{
		{"base", kv.Options{}, 0},
		{"sliding", kv.Options{}, 0},
		{"base", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
	} {
		t.Run(fmt.Sprintf("%s_kv%d", c.cas, c.opts.KVBits), func(t *testing.T) {
			m := load(t, "llama", c.cas)
			opts := c.opts
			prompts := batchPrompts(5)
			// Alone: each prompt, then the same forced tokens.
			force := []int32{3, 99, 12, 200, 45, 61, 7, 18, 150, 33}
			alone := make([][][]float32, len(prompts))
			for i, p := range prompts {
				caches := prefill(t, m, opts, p)
				for _, tok := range force {
					alone[i] = append(alone[i], run(t, m, caches, []int32{tok})[0])
				}
				freeAll(caches)
			}
			check := func(row, step int, got []float32) {
				t.Helper()
				if d := maxAbsDiff(got, alone[row][step]); d > max(c.tol, kernelRounding) {
					t.Errorf("row %d step %d: logits differ from alone by %g", row, step, d)
				}
			}
			per := [][]kv.Cache{prefill(t, m, opts, prompts[0]), prefill(t, m, opts, prompts[1]), prefill(t, m, opts, prompts[2])}
			batch := merge(t, per)
			for _, p := range per {
				freeAll(p)
			}
			defer func() { freeAll(batch) }()
			rows := []int{0, 1, 2} // the prompt each batch row holds
			steps := []int{0, 0, 0}
			advance := func() {
				in := make([]int32, len(rows))
				for i := range rows {
					in[i] = force[steps[i]]
				}
				for i, l := range stepRows(t, m, batch, in) {
					check(rows[i], steps[i], l)
					steps[i]++
				}
			}
			advance()
			advance()
			// keep filters the batch, row i taking row keep[i]'s place.
			filter := func(keep []int) {
				t.Helper()
				g := mlx.NewGraph(nil)
				defer g.Close()
				for _, b := range batch {
					if err := b.(*kv.Batched).Filter(g, keep); err != nil {
						t.Fatal(err)
					}
				}
				r, s := make([]int, len(keep)), make([]int, len(keep))
				for i, k := range keep {
					r[i], s[i] = rows[k], steps[k]
				}
				rows, steps = r, s
			}
			// Row 1 leaves.
			filter([]int{0, 2})
			advance()
			// Prompts 3 and 4 join, one step behind.
			joining := merge(t, [][]kv.Cache{prefill(t, m, opts, prompts[3]), prefill(t, m, opts, prompts[4])})
			g := mlx.NewGraph(nil)
			for j, b := range batch {
				if err := b.(*kv.Batched).Extend(g, joining[j].(*kv.Batched)); err != nil {
					t.Fatal(err)
				}
			}
			g.Close()
			freeAll(joining)
			rows, steps = append(rows, 3, 4), append(steps, 0, 0)
			advance()
			advance()
			// The second row leaves, the last taking its slot (a row's copy);
			// then the first two trade places (moves that would overwrite a
			// row still to move: a gather).
			filter([]int{0, 3, 2})
			advance()
			filter([]int{1, 0, 2})
			advance()
			rows0 := rows[0]
			// Row 0 (prompt 0) goes on alone.
			g = mlx.NewGraph(nil)
			one := make([]kv.Cache, len(batch))
			for j, b := range batch {
				x, err := b.(*kv.Batched).Extract(g, 0)
				if err != nil {
					t.Fatal(err)
				}
				one[j] = x
			}
			g.Close()
			defer freeAll(one)
			for s := steps[0]; s < len(force); s++ {
				check(rows0, s, run(t, m, one, []int32{force[s]})[0])
			}
			advance()
		})
	}
}

// other is a cache kind the batch does not know.
type other struct{ kv.Cache }

// TestBatchedErrors: what cannot be batched, and misuse, are errors that
// say why.
func TestBatchedErrors(t *testing.T) {
	m := load(t, "llama", "base")
	g := mlx.NewGraph(nil)
	defer g.Close()
	plain := prefill(t, m, kv.Options{}, []int32{1, 2, 3})
	defer freeAll(plain)
	for _, c := range []struct {
		caches []kv.Cache
		want   string
	}{
		{nil, "kv: merging no caches"},
		{[]kv.Cache{kv.NewRotating(8, 4)}, "kv: cache 0: a rotating cache that pins its first 4 positions cannot be batched"},
		{[]kv.Cache{plain[0], kv.NewRotating(8, 0)}, "kv: cache 1: batching a cache of window 0 (0: growing) with one of window 8"},
		{[]kv.Cache{plain[0], kv.NewQuantized(4, 32)}, "kv: cache 1: batching caches quantized differently (dense and 4 bits in groups of 32 from offset 0)"},
		{[]kv.Cache{other{plain[0]}}, "kv: cache 0: a kv_test.other cannot be batched (Plain and Rotating caches can)"},
	} {
		if _, err := kv.Merge(g, c.caches); err == nil || err.Error() != c.want {
			t.Errorf("Merge: %v, want %q", err, c.want)
		}
	}
	b, err := kv.Merge(g, []kv.Cache{plain[0], plain[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if err := b.Filter(g, []int{0, 2}); err == nil || err.Error() != "kv: row 2 of a batch of 2" {
		t.Errorf("Filter: %v", err)
	}
	if _, err := b.Extract(g, -1); err == nil || err.Error() != "kv: row -1 of a batch of 2" {
		t.Errorf("Extract: %v", err)
	}
	// A step on a graph whose Mask was not asked: the ropes would not know
	// each row's position.
	k := g.Zeros([]int{2, 2, 1, 32}, mlx.Float32)
	s := mlx.NewGraph(nil)
	defer s.Close()
	b.Update(s, k, k)
	if err := s.Err(); err == nil || err.Error() != "kv: a batched cache stepped on a graph that does not carry its rows' offsets [3 3] (a batch's Mask binds them)" {
		t.Errorf("Update without Mask: %v", err)
	}
	s2 := mlx.NewGraph(nil)
	defer s2.Close()
	b.Mask(s2, 1, 0, false)
	b.Update(s2, g.Zeros([]int{3, 2, 1, 32}, mlx.Float32), g.Zeros([]int{3, 2, 1, 32}, mlx.Float32))
	if err := s2.Err(); err == nil || err.Error() != "kv: a step of 3 rows on a batch of 2" {
		t.Errorf("Update of 3 rows: %v", err)
	}
}

// TestBatchedLongerSteps: steps of several positions per row on a batch
// (a batched prompt chunk), then single ones, give every row the very
// logits it gets alone with the same steps, on growing and window batches,
// with rows that have and have not filled their windows.
func TestBatchedLongerSteps(t *testing.T) {
	for _, c := range []struct {
		cas     string
		lengths []int
		tol     float64
	}{
		{"base", []int{1, 4, 9, 2}, 0},
		{"sliding", []int{7, 9, 12, 8}, 0},
		{"sliding", []int{1, 4, 9, 2}, 0},
	} {
		t.Run(fmt.Sprintf("%s_%v", c.cas, c.lengths), func(t *testing.T) {
			m := load(t, "llama", c.cas)
			chunk := []int32{17, 23, 99}
			after := []int32{5, 200, 31, 64}
			per := make([][]kv.Cache, len(c.lengths))
			alone := make([][][]float32, len(c.lengths))
			for i, n := range c.lengths {
				p := make([]int32, 0, n)
				for j := range n {
					p = append(p, int32((i*13+j*7+1)%250))
				}
				solo := prefill(t, m, kv.Options{}, p)
				alone[i] = append(alone[i], run(t, m, solo, chunk)[len(chunk)-1])
				for _, tok := range after {
					alone[i] = append(alone[i], run(t, m, solo, []int32{tok})[0])
				}
				freeAll(solo)
				per[i] = prefill(t, m, kv.Options{}, p)
			}
			batch := merge(t, per)
			for _, p := range per {
				freeAll(p)
			}
			defer freeAll(batch)
			B := len(c.lengths)
			in := make([]int32, 0, B*len(chunk))
			for range B {
				in = append(in, chunk...)
			}
			g := mlx.NewGraph(nil)
			logits := g.AsType(m.Forward(g, mlx.FromSlice(g, in, B, len(chunk)), batch), mlx.Float32)
			if err := g.Eval(logits); err != nil {
				t.Fatal(err)
			}
			v, err := logits.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
			vocab := len(v) / (B * len(chunk))
			worst := 0.0
			for i := range B {
				last := v[(i*len(chunk)+len(chunk)-1)*vocab : (i*len(chunk)+len(chunk))*vocab]
				worst = max(worst, maxAbsDiff(last, alone[i][0]))
			}
			for s, tok := range after {
				for i, l := range stepRows(t, m, batch, slices.Repeat([]int32{tok}, B)) {
					worst = max(worst, maxAbsDiff(l, alone[i][s+1]))
				}
			}
			t.Logf("largest logit difference batched vs alone: %g", worst)
			if worst > max(c.tol, kernelRounding) {
				t.Errorf("logits differ from the rows' own by up to %g (allowed %g)", worst, max(c.tol, kernelRounding))
			}
		})
	}
}

// TestMergeHoldsRowsDtype: a batch holds keys and values in its rows'
// dtype even when its rows join before they hold anything (rows merged
// before their prompts), and a step's keys are cast into it.
func TestMergeHoldsRowsDtype(t *testing.T) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	first := kv.NewPlain().Hold(mlx.BFloat16)
	second := kv.NewPlain().Hold(mlx.BFloat16)
	defer first.Free()
	defer second.Free()
	b, err := kv.Merge(g, []kv.Cache{first, second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Mask(g, 1, 0, false)
	step := g.Ones([]int{2, 2, 1, 8}, mlx.Float32)
	b.Update(g, step, step)
	if err := g.Eval(b.State()...); err != nil {
		t.Fatal(err)
	}
	for i, a := range b.State() {
		if a.Dtype() != mlx.BFloat16 {
			t.Fatalf("array %d of the batch holds %s, its rows bfloat16", i, a.Dtype())
		}
	}
}
