package kv

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// A small attention stack built from runtime ops, with random weights:
// token embedding, then per layer pre-norm attention (rope, grouped-query
// heads) and a SiLU MLP, each with a residual, a final norm and an output
// head. It runs either step by step over caches or over a whole sequence at
// once with explicit masks, and the two must give the same logits.

const (
	vocab   = 48
	embed   = 64
	qHeads  = 4
	kvHeads = 2
	headDim = 64 // a multiple of the quantization group sizes
	mlpDim  = 96
)

type testLayer struct{ wq, wk, wv, wo, w1, w2 *mlx.Array }

type testStack struct {
	embed, head *mlx.Array
	layers      []testLayer
	rope        mlx.RoPE
	softcap     float64 // > 0: attention written out by hand, scores soft-capped
}

func newTestStack(t testing.TB, nLayers int, seed uint64, softcap float64) *testStack {
	t.Helper()
	g := mlx.NewGraph(nil)
	defer g.Close()
	key := g.RandomKey(seed)
	var all []*mlx.Array
	w := func(rows, cols int) *mlx.Array {
		var k *mlx.Array
		key, k = g.RandomSplit(key)
		a := g.Normal([]int{rows, cols}, mlx.Float32, 0, float32(1/math.Sqrt(float64(rows))), k)
		all = append(all, a)
		return a
	}
	m := &testStack{rope: mlx.RoPE{Dims: headDim, Base: 10000, Scale: 1}, softcap: softcap}
	m.embed = w(vocab, embed)
	for range nLayers {
		m.layers = append(m.layers, testLayer{
			wq: w(embed, qHeads*headDim), wk: w(embed, kvHeads*headDim), wv: w(embed, kvHeads*headDim),
			wo: w(qHeads*headDim, embed), w1: w(embed, mlpDim), w2: w(mlpDim, embed),
		})
	}
	m.head = w(embed, vocab)
	if err := g.Eval(all...); err != nil {
		t.Fatal(err)
	}
	g.Keep(all...)
	t.Cleanup(func() {
		for _, a := range all {
			a.Free()
		}
	})
	return m
}

// heads turns [1, L, H*D] into [1, H, L, D].
func heads(g *mlx.Graph, x *mlx.Array, h int) *mlx.Array {
	return g.Transpose(g.Reshape(x, 1, x.Dim(1), h, headDim), 0, 2, 1, 3)
}

// attend is the attention of one layer over kv, fused or by hand.
func (m *testStack) attend(g *mlx.Graph, q *mlx.Array, kv KV, mask mlx.AttentionMask) *mlx.Array {
	scale := 1 / math.Sqrt(headDim)
	if m.softcap == 0 {
		return Attend(g, q, kv, Spec{Scale: float32(scale), Mask: mask})
	}
	s := Scores(g, g.MultiplyScalar(q, scale), kv)
	s = g.MultiplyScalar(g.Tanh(g.DivideScalar(s, m.softcap)), m.softcap)
	s = MaskScores(g, s, mask)
	return Mix(g, g.Softmax(s, true, -1), kv)
}

// block runs layer l on x [1, L, E]; kvFor stores a step's keys and values
// (rotated for their positions) and returns what attention reads, and attn
// computes the attention itself.
func (m *testStack) block(g *mlx.Graph, l int, x *mlx.Array, offset int,
	attn func(q, k, v *mlx.Array) *mlx.Array) *mlx.Array {
	w := m.layers[l]
	h := g.RMSNorm(x, nil, 1e-5)
	q := g.RoPE(heads(g, g.Matmul(h, w.wq), qHeads), &m.rope, offset)
	k := g.RoPE(heads(g, g.Matmul(h, w.wk), kvHeads), &m.rope, offset)
	v := heads(g, g.Matmul(h, w.wv), kvHeads)
	o := attn(q, k, v)
	o = g.Reshape(g.Transpose(o, 0, 2, 1, 3), 1, x.Dim(1), qHeads*headDim)
	x = g.Add(x, g.Matmul(o, w.wo))
	h = g.RMSNorm(x, nil, 1e-5)
	return g.Add(x, g.Matmul(g.SiLU(g.Matmul(h, w.w1)), w.w2))
}

func (m *testStack) embedTokens(g *mlx.Graph, tokens []int32) *mlx.Array {
	x := g.Take(m.embed, mlx.FromSlice(g, tokens, len(tokens)), 0)
	return g.Reshape(x, 1, len(tokens), embed)
}

// lastLogits is the head's output for the last position, [vocab].
func (m *testStack) lastLogits(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	n := x.Dim(1)
	x = g.Slice(g.RMSNorm(x, nil, 1e-5), []int{0, n - 1, 0}, []int{1, n, embed})
	return g.Reshape(g.Matmul(x, m.head), vocab)
}

// layerSpec says how a layer attends: over its cache with a window
// (0: none), its masks shared with the other layers of its group.
type layerSpec struct {
	window int
	group  int
}

// step runs tokens through the stack over caches, masks asked once per
// group of layers, as a generated model does.
func (m *testStack) step(g *mlx.Graph, tokens []int32, caches []Cache, specs []layerSpec) *mlx.Array {
	n := len(tokens)
	masks := map[int]mlx.AttentionMask{}
	for i, sp := range specs {
		if _, ok := masks[sp.group]; !ok {
			masks[sp.group] = caches[i].Mask(g, n, sp.window, m.softcap > 0)
		}
	}
	x := m.embedTokens(g, tokens)
	for l := range m.layers {
		c := caches[l]
		x = m.block(g, l, x, c.Offset(), func(q, k, v *mlx.Array) *mlx.Array {
			return m.attend(g, q, c.Update(g, k, v), masks[specs[l].group])
		})
	}
	return m.lastLogits(g, x)
}

// recompute runs the whole sequence at once. visible[l][i*n+j] says whether
// row i attends to position j in layer l; rows with quantRows[i] attend
// over keys and values quantized with q and dequantized again (what a
// quantized cache holds), the others over the exact ones.
func (m *testStack) recompute(g *mlx.Graph, tokens []int32, visible [][]bool, quantRows []bool, q Quantization) *mlx.Array {
	n := len(tokens)
	anyQuant := false
	rowSel := make([]bool, n)
	for i, b := range quantRows {
		rowSel[i], anyQuant = b, anyQuant || b
	}
	sel := mlx.FromSlice(g, rowSel, 1, 1, n, 1)
	fake := func(a *mlx.Array) *mlx.Array {
		return g.Dequantize(g.Quantize(a, q.group(), q.Bits), mlx.Float32)
	}
	x := m.embedTokens(g, tokens)
	for l := range m.layers {
		mask := mlx.MaskArray(mlx.FromSlice(g, visible[l], n, n))
		x = m.block(g, l, x, 0, func(q, k, v *mlx.Array) *mlx.Array {
			out := m.attend(g, q, KV{Keys: k, Values: v}, mask)
			if anyQuant {
				qo := m.attend(g, q, KV{Keys: fake(k), Values: fake(v)}, mask)
				out = g.Where(sel, qo, out)
			}
			return out
		})
	}
	return m.lastLogits(g, x)
}

// decodeCase is a run of steps over caches: step sizes (a size > 1 is a
// prefill chunk), trims after some steps, a save and load after one.
type decodeCase struct {
	name    string
	specs   []layerSpec
	caches  func(l int) Cache
	visible func(l, i, j int, row rowInfo) bool
	quant   Quantization // the caches' quantization, for the reference
	softcap float64
	steps   []int
	trims   map[int]int // after step s, trim this many positions
	saveAt  int         // after this step (1-based), save, load and go on; 0: never
}

// rowInfo is what the reference needs to know of the step that last
// processed a row.
type rowInfo struct {
	size, start int // that step's size and first position
	quantized   bool
}

func repeat(n, size int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = size
	}
	return s
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Visibility rules of the reference, per layer kind.
func causal(_, i, j int, _ rowInfo) bool { return j <= i }

func windowed(w int) func(l, i, j int, r rowInfo) bool {
	return func(_, i, j int, _ rowInfo) bool { return j <= i && i-j < w }
}

// pinned is what a rotating cache of maxSize that pins keep positions lets
// a row see after one prefill: within a prefill, the window of maxSize;
// decoding, everything until the ring is full, then the pinned positions
// and the maxSize - keep newest.
func pinned(maxSize, keep int) func(l, i, j int, r rowInfo) bool {
	return func(_, i, j int, r rowInfo) bool {
		if j > i {
			return false
		}
		if r.size > 1 {
			return i-j < maxSize
		}
		return i < maxSize || j < keep || i-j < maxSize-keep
	}
}

func mixed(rules ...func(l, i, j int, r rowInfo) bool) func(l, i, j int, r rowInfo) bool {
	return func(l, i, j int, r rowInfo) bool { return rules[l](l, i, j, r) }
}

func decodeCases() []decodeCase {
	full3 := []layerSpec{{0, 0}, {0, 0}, {0, 0}}
	swa := []layerSpec{{0, 0}, {4, 1}, {0, 0}}
	swaRule := mixed(causal, windowed(4), causal)
	swaCaches := func(o Options) func(int) Cache {
		return func(l int) Cache {
			if l == 1 {
				return o.Sliding(4)
			}
			return o.Full()
		}
	}
	fullCaches := func(o Options) func(int) Cache {
		return func(int) Cache { return o.Full() }
	}
	return []decodeCase{
		{name: "plain", specs: full3, caches: fullCaches(Options{}), visible: causal,
			steps: cat([]int{7}, repeat(5, 1))},
		{name: "plain chunked prefill and trim", specs: full3, caches: func(int) Cache { return NewPlain() }, visible: causal,
			steps: cat([]int{5, 4}, repeat(3, 1), repeat(3, 1), []int{2}), trims: map[int]int{4: 2, 7: 3}},
		{name: "sliding window shorter than the prompt, ring wraps", specs: swa, caches: swaCaches(Options{}), visible: swaRule,
			steps: cat([]int{9}, repeat(7, 1), []int{3}, repeat(2, 1))},
		{name: "sliding window shorter than the ring", specs: []layerSpec{{0, 0}, {3, 1}, {3, 1}},
			caches: func(l int) Cache {
				if l == 0 {
					return NewPlain()
				}
				return NewRotating(8, 0)
			},
			visible: mixed(causal, windowed(3), windowed(3)),
			steps:   cat([]int{6}, repeat(10, 1), []int{4}, repeat(3, 1))},
		{name: "rotating trim then decode", specs: []layerSpec{{0, 0}, {16, 1}, {0, 0}},
			caches: func(l int) Cache {
				if l == 1 {
					return NewRotating(16, 0)
				}
				return NewPlain()
			},
			visible: mixed(causal, windowed(16), causal),
			steps:   cat([]int{5}, repeat(3, 1), repeat(3, 1), []int{2}), trims: map[int]int{4: 2}},
		{name: "max kv size, short prompt", specs: full3, caches: fullCaches(Options{MaxKVSize: 8}), visible: pinned(8, MaxKVKeep),
			steps: cat([]int{5}, repeat(12, 1))},
		{name: "max kv size, long prompt", specs: full3, caches: fullCaches(Options{MaxKVSize: 8}), visible: pinned(8, MaxKVKeep),
			steps: cat([]int{11}, repeat(6, 1))},
		{name: "quantized 8 bits from the start", specs: swa, caches: swaCaches(Options{KVBits: 8}), visible: swaRule,
			quant: Quantization{Bits: 8}, steps: cat([]int{6}, repeat(4, 1), []int{3}, repeat(2, 1))},
		{name: "quantized 4 bits from position 8, sliding quantized too", specs: swa,
			caches: swaCaches(Options{KVBits: 4, QuantizedKVStart: 8}), visible: swaRule,
			quant: Quantization{Bits: 4, Start: 8}, steps: cat([]int{6}, repeat(5, 1), []int{3}, repeat(2, 1))},
		{name: "written-out attention, soft-capped", specs: swa, caches: swaCaches(Options{}), visible: swaRule,
			softcap: 5, steps: cat([]int{6}, repeat(4, 1), []int{3}, repeat(3, 1))},
		{name: "written-out attention, quantized", specs: swa, caches: swaCaches(Options{KVBits: 8, KVGroupSize: 32}), visible: swaRule,
			quant: Quantization{Bits: 8, GroupSize: 32}, softcap: 5, steps: cat([]int{6}, repeat(6, 1), []int{2}, repeat(2, 1))},
		{name: "save, load, continue across the switch to quantized", specs: swa,
			caches: swaCaches(Options{KVBits: 8, QuantizedKVStart: 9}), visible: swaRule,
			quant: Quantization{Bits: 8, Start: 9}, steps: cat([]int{7}, repeat(6, 1)), saveAt: 2},
		{name: "save, load, continue a wrapped ring", specs: swa, caches: swaCaches(Options{}), visible: swaRule,
			steps: cat([]int{5}, repeat(6, 1), []int{3}, repeat(2, 1)), saveAt: 7},
	}
}

// TestDecodeEqualsRecompute runs each case's steps over caches and checks
// the last logits against one forward pass over the tokens the caches hold,
// with the masks the cache kinds imply. Tolerance: float32 evaluation of
// the same sums in another order (another matmul shape, another attention
// kernel), around 1e-6 relative per layer; 1e-4 of the logits' scale leaves
// a wide margin while any wrong position, mask or rotation moves logits by
// far more.
func TestDecodeEqualsRecompute(t *testing.T) {
	for ci, tc := range decodeCases() {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestStack(t, len(tc.specs), uint64(ci+1), tc.softcap)
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			caches := make([]Cache, len(tc.specs))
			for l := range caches {
				caches[l] = tc.caches(l)
			}
			defer func() { freeAll(caches) }()
			var seq []int32
			var rows []rowInfo
			switched := false
			g := mlx.NewGraph(nil)
			defer g.Close()
			var got []float32
			for s, n := range tc.steps {
				g.Reset()
				tokens := make([]int32, n)
				for i := range tokens {
					tokens[i] = int32(rng.IntN(vocab))
				}
				start := len(seq)
				if tc.quant.Bits > 0 && start >= tc.quant.Start && start > 0 {
					switched = true
				}
				for range tokens {
					rows = append(rows, rowInfo{size: n, start: start, quantized: switched})
				}
				seq = append(seq, tokens...)
				logits := m.step(g, tokens, caches, tc.specs)
				var err error
				if got, err = logits.Float32s(); err != nil {
					t.Fatalf("step %d: %v", s, err)
				}
				for l, c := range caches {
					if c.Offset() != len(seq) {
						t.Fatalf("step %d: layer %d offset %d, want %d", s, l, c.Offset(), len(seq))
					}
				}
				if trim, ok := tc.trims[s]; ok {
					for l, c := range caches {
						if !c.Trimmable() {
							t.Fatalf("step %d: layer %d cannot be trimmed", s, l)
						}
						if got := c.Trim(trim); got != trim {
							t.Fatalf("step %d: layer %d trimmed %d, want %d", s, l, got, trim)
						}
					}
					seq, rows = seq[:len(seq)-trim], rows[:len(rows)-trim]
				}
				if s+1 == tc.saveAt {
					path := filepath.Join(t.TempDir(), "cache.safetensors")
					if err := Save(path, caches, nil); err != nil {
						t.Fatal(err)
					}
					freeAll(caches)
					loaded, _, err := Load(path)
					if err != nil {
						t.Fatal(err)
					}
					caches = loaded
				}
			}
			if tc.trims[len(tc.steps)-1] > 0 {
				t.Fatal("the last step must not be trimmed away")
			}
			n := len(seq)
			visible := make([][]bool, len(tc.specs))
			quantRows := make([]bool, n)
			for l := range visible {
				visible[l] = make([]bool, n*n)
				for i := range n {
					for j := range n {
						visible[l][i*n+j] = tc.visible(l, i, j, rows[i])
					}
				}
			}
			for i, r := range rows {
				quantRows[i] = r.quantized
			}
			if tc.quant.Bits > 0 && !quantRows[n-1] {
				t.Fatal("the case never switched to quantized")
			}
			g.Reset()
			want, err := m.recompute(g, seq, visible, quantRows, tc.quant).Float32s()
			if err != nil {
				t.Fatal(err)
			}
			closeLogits(t, got, want, 1e-4)
		})
	}
}

// closeLogits fails t when got and want differ by more than tol of want's
// largest magnitude (at least 1).
func closeLogits(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	scale, worst, at := 1.0, 0.0, 0
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
		if d := math.Abs(float64(got[i] - want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if !(worst <= tol*scale) {
		t.Fatalf("logit %d: %v, recomputed %v (difference %.3g > %.3g)", at, got[at], want[at], worst, tol*scale)
	}
	t.Logf("largest difference %.3g of scale %.3g", worst, scale)
}
