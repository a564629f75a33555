package kv

import "github.com/archgen/archgen/runtime/mlx"

// Attention over what a cache holds: fused for dense keys and values, over
// quantized triples for quantized ones, with sinks, in float32, and the
// pieces of attention written out (scores, a mask on them, the weighted
// sum of values).

// Precision is the dtype attention's scores and softmax run in.
type Precision int

const (
	// QueryDtype: in the queries' dtype, as MLX's fused kernel runs.
	QueryDtype Precision = iota
	// Float32: queries, keys and values widened to float32, the output cast
	// back to the queries' dtype (the compute dtype: mlx-lm casts to the
	// values', which are in it).
	Float32
	// Float32AtFloat16: Float32 when the queries are float16, QueryDtype
	// otherwise (mlx-lm makes the cast in some models only for float16,
	// whose range the scores can exceed).
	Float32AtFloat16
)

// Spec says how Attend attends: its scale and mask, and at most one of the
// variants (Sinks, a Precision other than QueryDtype, Softcap).
type Spec struct {
	Scale float32
	Mask  mlx.AttentionMask
	// Sinks [Hq], when set, holds one learned logit per query head that
	// joins each row of that head's softmax and takes its share of the
	// probability without contributing a value (gpt-oss's).
	Sinks     *mlx.Array
	Precision Precision
	// Softcap > 0 caps the scores to tanh(s / Softcap) * Softcap; MLX's
	// fused kernel has no cap, so attention is written out (Gemma 2's).
	Softcap float64
}

// Attend is softmax(q k^T * scale + mask) v over kv, q shaped [B, Hq, L,
// D] (Hq a multiple of Hkv), as sp says: MLX's fused kernel for dense
// caches (with its sinks), attention on the quantized keys and values for
// quantized ones (as mlx-lm's quantized_scaled_dot_product_attention, a
// sink put before each row of scores and dropped after the softmax, as
// MLX's own unfused attention does), in float32 where asked, or written
// out with soft-capped scores.
func Attend(g *mlx.Graph, q *mlx.Array, kv KV, sp Spec) *mlx.Array {
	switch {
	case sp.Softcap > 0:
		return softcapAttention(g, q, kv, sp)
	case sp.Precision == Float32, sp.Precision == Float32AtFloat16 && q.Dtype() == mlx.Float16:
		return float32Attention(g, q, kv, sp)
	case kv.QKeys != nil:
		return quantizedAttention(g, q, kv, sp.Scale, sp.Mask, sp.Sinks)
	}
	return g.SDPASinks(q, kv.Keys, kv.Values, sp.Scale, sp.Mask, sp.Sinks)
}

// softcapAttention writes attention out from Scores, MaskScores and Mix,
// so it reads every cache kind, quantized ones included: q is scaled,
// scored, the scores capped, masked, normalized in float32 precision and
// mixed with the values.
func softcapAttention(g *mlx.Graph, q *mlx.Array, kv KV, sp Spec) *mlx.Array {
	scores := Scores(g, g.MultiplyScalar(q, float64(sp.Scale)), kv)
	scores = g.MultiplyScalar(g.Tanh(g.DivideScalar(scores, sp.Softcap)), sp.Softcap)
	scores = MaskScores(g, scores, sp.Mask)
	return Mix(g, g.Softmax(scores, true, -1), kv)
}

// float32Attention attends on q, keys and values widened to float32 and
// casts the output back to q's dtype. Half-precision keys and values are
// widened where attention reads them (archgen's kernel widens them
// exactly as it reads them, libmlx's promotes them), not copied whole.
func float32Attention(g *mlx.Graph, q *mlx.Array, kv KV, sp Spec) *mlx.Array {
	q32 := q
	if q.Dtype() != mlx.Float32 {
		q32 = g.AsType(q, mlx.Float32)
	}
	var out *mlx.Array
	if kv.QKeys != nil {
		out = quantizedAttention(g, q32, kv, sp.Scale, sp.Mask, sp.Sinks)
	} else {
		out = g.SDPASinks(q32, kv.Keys, kv.Values, sp.Scale, sp.Mask, sp.Sinks)
	}
	if q.Dtype() != mlx.Float32 {
		out = g.AsType(out, q.Dtype())
	}
	return out
}

// Scores is q k^T for attention written out by hand, over dense or
// quantized keys: q [B, Hq, L, D] (already scaled) against the keys
// [B, Hkv, S, D] gives [B, Hq, L, S]. Grouped-query heads are matched as
// mlx-lm's gemma2 does, by viewing q as [B, Hkv, rep, L, D] against keys
// with a unit axis at 2; the result is folded back to Hq heads (a view).
func Scores(g *mlx.Graph, q *mlx.Array, kv KV) *mlx.Array {
	qs := q.Shape()
	if len(qs) != 4 {
		g.Failf("kv: scores need queries [B, Hq, L, D], got %v", qs)
		return q
	}
	if kv.QKeys != nil {
		if kv.QValues == nil {
			g.Failf("kv: quantized keys without quantized values")
			return q
		}
		gq, qk, _, rep := groupHeads(g, q, *kv.QKeys, *kv.QValues)
		return ungroupHeads(g, g.QuantizedMatmul(gq, qk, true), qs[1], rep)
	}
	gq, k, rep := groupDense(g, q, kv.Keys)
	return ungroupHeads(g, g.Matmul(gq, g.Swapaxes(k, -1, -2)), qs[1], rep)
}

// Mix is probs v, the second half of attention written out by hand: probs
// [B, Hq, L, S] (from Scores, masked and softmaxed) against the values
// [B, Hkv, S, Dv] gives [B, Hq, L, Dv].
func Mix(g *mlx.Graph, probs *mlx.Array, kv KV) *mlx.Array {
	ps := probs.Shape()
	if len(ps) != 4 {
		g.Failf("kv: mixing needs probabilities [B, Hq, L, S], got %v", ps)
		return probs
	}
	if kv.QValues != nil {
		if kv.QKeys == nil {
			g.Failf("kv: quantized values without quantized keys")
			return probs
		}
		gp, _, qv, rep := groupHeads(g, probs, *kv.QKeys, *kv.QValues)
		return ungroupHeads(g, g.QuantizedMatmul(gp, qv, false), ps[1], rep)
	}
	gp, v, rep := groupDense(g, probs, kv.Values)
	return ungroupHeads(g, g.Matmul(gp, v), ps[1], rep)
}

// MaskScores applies mask to scores [B, Hq, L, S] from Scores as mlx-lm's
// written-out attention does: a boolean mask (true attends) sets masked
// scores to the lowest finite value of their dtype, an additive mask is
// added, the "causal" mode is the boolean mask aligned at the end of the
// keys, and no mask leaves the scores as they are.
func MaskScores(g *mlx.Graph, scores *mlx.Array, mask mlx.AttentionMask) *mlx.Array {
	return maskScores(g, scores, mask, false)
}

// groupDense views x [B, Hq, L, X] as [B, Hkv, rep, L, X] and gives the
// dense KV array a [B, Hkv, S, Y] unit axis at 2 when rep = Hq/Hkv > 1.
func groupDense(g *mlx.Graph, x, a *mlx.Array) (*mlx.Array, *mlx.Array, int) {
	xs := x.Shape()
	hkv := a.Dim(1)
	if hkv == 0 || xs[1]%hkv != 0 {
		g.Failf("kv: %d query heads are not a multiple of %d KV heads", xs[1], hkv)
		return x, a, 1
	}
	rep := xs[1] / hkv
	if rep == 1 {
		return x, a, 1
	}
	return g.Reshape(x, xs[0], hkv, rep, xs[2], xs[3]), g.ExpandDims(a, 2), rep
}
