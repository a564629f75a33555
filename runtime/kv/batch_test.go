package kv_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

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
	layers := len(per[0])
	batch := make([]kv.Cache, layers)
	g := mlx.NewGraph(nil)
	for j := range layers {
		col := make([]kv.Cache, B)
		for i := range per {
			col[i] = per[i][j]
		}
		b, err := kv.Merge(g, col)
		if err != nil {
			t.Fatal(err)
		}
		batch[j] = b
	}
	g.Close()
	defer freeAll(batch)
	for s := 1; s < steps; s++ {
		in := make([]int32, B)
		for i := range in {
			in[i] = toks[i][s-1]
		}
		g := mlx.NewGraph(nil)
		logits := g.AsType(m.Forward(g, mlx.FromSlice(g, in, B, 1), batch), mlx.Float32)
		if err := g.Eval(logits); err != nil {
			t.Fatal(err)
		}
		v, err := logits.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		vocab := len(v) / B
		for i := range B {
			l := v[i*vocab : (i+1)*vocab]
			toks[i] = append(toks[i], argmax(l))
			rows[i] = append(rows[i], l)
		}
	}
	return toks, rows
}

// TestBatchedDecodeMatchesSolo merges sequences of different lengths into
// one batch after their prompts and decodes them together: every row must
// pick the tokens it picks alone, from the same logits. Growing caches give
// the very same logits; a window batch holds its ring in one order for every
// row where each row alone has its own, so its softmax sums the same terms
// in another order (a float32 rounding difference, bounded below).
func TestBatchedDecodeMatchesSolo(t *testing.T) {
	cases := []struct {
		arch, cas string
		opts      kv.Options
		tol       float64
	}{
		{"llama", "base", kv.Options{}, 0},
		{"llama", "sliding", kv.Options{}, 1e-4},
		{"mistral", "base", kv.Options{}, 0},
		{"gemma2", "capped", kv.Options{}, 0},
		{"gemma2", "defaults", kv.Options{}, 0}, // grouped heads, written-out attention
		{"llama", "base", kv.Options{KVBits: 8, KVGroupSize: 32}, 0},
		{"llama", "base", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
		{"mistral", "base", kv.Options{KVBits: 4, KVGroupSize: 32}, 0},
	}
	const steps = 12
	for _, c := range cases {
		// 2 rows is also the KV heads of the grouped cases, where a mask
		// broadcast over the wrong axis would go unnoticed.
		for _, B := range []int{16, 2} {
			t.Run(fmt.Sprintf("%s_%s_kv%d_B%d", c.arch, c.cas, c.opts.KVBits, B), func(t *testing.T) {
				m := load(t, c.arch, c.cas)
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
				if worst > c.tol {
					t.Errorf("logits differ from the sequences' own by up to %g (allowed %g)", worst, c.tol)
				}
			})
		}
	}
}
