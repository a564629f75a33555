package kv

import (
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// Quantization asks a cache to hold its keys and values quantized: MLX's
// affine quantization along the head dim, in groups of GroupSize values
// with Bits bits each. The cache switches at the first step whose Update
// finds its offset at or past Start: it quantizes what it holds then, and
// stores every later step quantized. This is when mlx-lm switches (it
// converts the cache after the step that brought its offset to
// quantized_kv_start, before the next one).
type Quantization struct {
	Bits      int // 0: stay dense; else 4 or 8 (MLX also has 2, 3, 5 and 6)
	GroupSize int // 64 when 0; MLX has 32, 64 and 128
	Start     int // the offset from which the cache is quantized
}

// DefaultGroupSize is the quantization group size when none is given, as
// in mlx-lm.
const DefaultGroupSize = 64

func (q Quantization) group() int {
	if q.GroupSize == 0 {
		return DefaultGroupSize
	}
	return q.GroupSize
}

// Check reports whether MLX can quantize as q asks.
func (q Quantization) Check() error {
	if q.Bits == 0 {
		return nil
	}
	return checkQuantization(q.Bits, q.group())
}

// switchAt quantizes s when q says so at this offset. It returns false when
// the step must not go on (g failed).
func (q Quantization) switchAt(g *mlx.Graph, s *store, offset int) bool {
	if g.Err() != nil {
		return false
	}
	if q.Bits == 0 || s.quantized() || offset < q.Start || s.broken != nil {
		return true
	}
	if err := q.Check(); err != nil {
		g.Fail(err)
		return false
	}
	s.quantize(g, q.Bits, q.group())
	return g.Err() == nil
}

// quantizedAttention is softmax(q k^T * scale + mask) v computed on the
// quantized keys and values themselves, as mlx-lm's
// quantized_scaled_dot_product_attention does: queries scaled first, scores
// by a quantized matmul against the keys, the mask, a softmax in float32
// precision, and a quantized matmul against the values. Grouped-query heads
// are handled by viewing the queries as [B, Hkv, rep, L, D] against keys
// and values given a unit axis at 2.
func quantizedAttention(g *mlx.Graph, q *mlx.Array, kv KV, scale float32, mask mlx.AttentionMask, sinks *mlx.Array) *mlx.Array {
	qs := q.Shape()
	if len(qs) != 4 || kv.QValues == nil {
		g.Failf("kv: attention needs queries [B, Hq, L, D] (got %v) and quantized keys and values", qs)
		return q
	}
	q = g.MultiplyScalar(q, float64(scale))
	q, qk, qv, rep := groupHeads(g, q, *kv.QKeys, *kv.QValues)
	scores := g.QuantizedMatmul(q, qk, true)
	scores = maskScores(g, scores, mask, rep > 1)
	if sinks != nil {
		return ungroupHeads(g, sinkAttention(g, scores, sinks, qv), qs[1], rep)
	}
	probs := g.Softmax(scores, true, -1)
	out := g.QuantizedMatmul(probs, qv, false)
	return ungroupHeads(g, out, qs[1], rep)
}

// sinkAttention is the softmax of scores [B, Hkv, rep, L, S] (or
// [B, Hq, L, S]) with each head's sink logit as an extra first column,
// that column dropped again, times the quantized values.
func sinkAttention(g *mlx.Graph, scores, sinks *mlx.Array, qv mlx.Quantized) *mlx.Array {
	s := scores.Shape()
	if sinks.Ndim() != 1 || len(s) < 4 || sinks.Dim(0) != prod(s[1:len(s)-2]) {
		g.Failf("kv: sinks %v do not give one logit to each of the %d query heads", sinks.Shape(), prod(s[1:max(len(s)-2, 1)]))
		return scores
	}
	heads := append([]int{1}, s[1:len(s)-2]...)
	col := g.Reshape(g.AsType(sinks, scores.Dtype()), append(heads, 1, 1)...)
	col = g.BroadcastTo(col, append(append([]int{}, s[:len(s)-1]...), 1)...)
	probs := g.Softmax(g.Concatenate(-1, col, scores), true, -1)
	start := make([]int, len(s))
	start[len(s)-1] = 1
	stop := append([]int{}, s...)
	stop[len(s)-1]++
	return g.QuantizedMatmul(g.Slice(probs, start, stop), qv, false)
}

func prod(xs []int) int {
	n := 1
	for _, x := range xs {
		n *= x
	}
	return n
}

// groupHeads views queries [B, Hq, L, D] as [B, Hkv, rep, L, D] and gives
// the quantized keys and values a unit axis at 2, when Hq is a multiple
// rep > 1 of the Hkv heads of the keys.
func groupHeads(g *mlx.Graph, q *mlx.Array, k, v mlx.Quantized) (*mlx.Array, mlx.Quantized, mlx.Quantized, int) {
	qs := q.Shape()
	hkv := k.Weight.Dim(1)
	if hkv == 0 || qs[1]%hkv != 0 {
		g.Failf("kv: %d query heads are not a multiple of %d KV heads", qs[1], hkv)
		return q, k, v, 1
	}
	rep := qs[1] / hkv
	if rep == 1 {
		return q, k, v, 1
	}
	q = g.Reshape(q, qs[0], hkv, rep, qs[2], qs[3])
	return q, expandQuantized(g, k), expandQuantized(g, v), rep
}

func expandQuantized(g *mlx.Graph, x mlx.Quantized) mlx.Quantized {
	x.Weight = g.ExpandDims(x.Weight, 2)
	x.Scales = g.ExpandDims(x.Scales, 2)
	x.Biases = g.ExpandDims(x.Biases, 2)
	return x
}

// ungroupHeads folds [B, Hkv, rep, L, X] back to [B, Hq, L, X].
func ungroupHeads(g *mlx.Graph, x *mlx.Array, hq, rep int) *mlx.Array {
	if rep == 1 {
		return x
	}
	s := x.Shape()
	if len(s) != 5 {
		return x
	}
	return g.Reshape(x, s[0], hq, s[3], s[4])
}

// maskScores applies an attention mask to scores [..., L, S] the way
// mlx-lm's written-out attention does: the "causal" mode becomes the
// boolean mask aligned at the end of the keys, a boolean mask replaces
// masked scores with the lowest finite value of the scores' dtype, and any
// other mask is added. grouped says the scores carry the extra rep axis of
// grouped heads, so that a 4-D mask gets a unit axis to match.
func maskScores(g *mlx.Graph, scores *mlx.Array, mask mlx.AttentionMask, grouped bool) *mlx.Array {
	var m *mlx.Array
	switch mask.Mode {
	case "":
		return scores
	case "causal":
		s := scores.Shape()
		if len(s) < 2 {
			g.Failf("kv: scores of shape %v have no [L, S] axes", s)
			return scores
		}
		l, n := s[len(s)-2], s[len(s)-1]
		qi := g.ExpandDims(g.Arange(float64(n-l), float64(n), 1, mlx.Int32), 1)
		ki := g.ExpandDims(g.Arange(0, float64(n), 1, mlx.Int32), 0)
		m = g.GreaterEqual(qi, ki)
	case "array":
		m = mask.Array
		if grouped && m.Ndim() > 3 {
			m = g.ExpandDims(m, -3)
		}
	default:
		g.Failf("kv: unknown mask mode %q", mask.Mode)
		return scores
	}
	if m.Dtype() == mlx.Bool {
		return g.Where(m, scores, g.Scalar(lowest(scores.Dtype()), scores.Dtype()))
	}
	return g.Add(scores, m)
}

// lowest is the most negative finite value of a floating dtype (numpy's
// finfo(dtype).min).
func lowest(d mlx.Dtype) float64 {
	switch d {
	case mlx.Float16:
		return -65504
	case mlx.BFloat16:
		return -float64(math.Float32frombits(0x7f7f0000))
	case mlx.Float64:
		return -math.MaxFloat64
	}
	return -math.MaxFloat32
}
