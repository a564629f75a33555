package nn

import (
	"math"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Lightning attention (Bailing's linear layers): one projection gives q,
// k and v per head; q and k are normed and rotated as attention's are; a
// state per head, S ← a S + kᵀ v with a decay a constant per head and
// layer, gives each step's output scale · q S; the output is normed in
// groups, gated by a sigmoid and projected back. The layer's cache keeps
// the state alone.

// LightningHeads are a lightning layer's shape: Heads of Dim channels
// each for q, k and v, the output normed in Groups equal groups.
type LightningHeads struct {
	Heads, Dim, Groups int
	Scale              float64
}

// Width is the heads' channels side by side: q's, k's, v's and the
// output's width.
func (h LightningHeads) Width() int { return h.Heads * h.Dim }

// LightningDecay is the per-step decay of each of heads heads, e^{-s_h f}
// in float32: s_h the ALiBi slopes of heads heads (2^(-8/n · (h + 1)) for
// a power of two n; for another count, those of the power of two below it
// followed by every other one of the next power's), f the layer's factor.
// The product is rounded to float32 before MLX's exp, as mlx-lm makes it.
// It is made once at load.
func (w *Weights) LightningDecay(heads int, factor float64) *mlx.Array {
	if w.l.record {
		return nil
	}
	logs := LightningLogDecay(heads, factor)
	g := w.l.g
	d := g.Exp(mlx.FromSlice(g, logs, heads))
	if err := g.Err(); err != nil {
		w.failf("lightning decay: %v", err)
		return nil
	}
	g.Keep(d)
	return w.keep(d)
}

// LightningLogDecay is each of heads heads' log decay a step, -s_h f in
// float32 (LightningDecay's exponent).
func LightningLogDecay(heads int, factor float64) []float32 {
	logs := make([]float32, heads)
	for i, s := range alibiSlopes(heads) {
		logs[i] = -(float32(s) * float32(factor))
	}
	return logs
}

// alibiSlopes are ALiBi's slopes for n heads (float64, as computed before
// rounding to float32).
func alibiSlopes(n int) []float64 {
	pow2 := func(n int) []float64 {
		out := make([]float64, n)
		e := -math.Pow(2, -(math.Log2(float64(n)) - 3))
		for i := range out {
			out[i] = math.Pow(2, e*float64(i+1))
		}
		return out
	}
	if n <= 0 {
		return nil
	}
	l := math.Log2(float64(n))
	if l == math.Floor(l) {
		return pow2(n)
	}
	p := 1 << int(math.Floor(l))
	out := pow2(p)
	next := pow2(2 * p)
	for i := 0; i < 2*p && len(out) < n; i += 2 {
		out = append(out, next[i])
	}
	return out
}

// LightningMix runs the layer's middle on the projection qkv [B, L, 3 ·
// Width] (q, k and v heads in turn): q and k normed per head (where qn and
// kn are not nil) and rotated from the cache's offset, then the
// recurrence from the state in the slot of s, which keeps the last. In
// float32 archgen's kernel runs it (mlx.Graph.Lightning); in the half
// types it is composed of libmlx's ops step by step as mlx-lm composes it,
// the state in the activations' dtype. It returns [B, L, Width].
func LightningMix(g *mlx.Graph, s *kv.States, slot int, qkv *mlx.Array, qn, kn *RMSNorm, rope Rope, decay *mlx.Array, h LightningHeads) *mlx.Array {
	B, L := qkv.Dim(0), qkv.Dim(1)
	parts := g.SplitAt(g.Reshape(qkv, B, L, 3*h.Heads, h.Dim), []int{h.Heads, 2 * h.Heads}, 2)
	heads := func(a *mlx.Array) *mlx.Array { return g.Transpose(a, 0, 2, 1, 3) } // [B, heads, L, Dim] and back
	q, k := qn.Apply(g, heads(parts[0])), kn.Apply(g, heads(parts[1]))
	q, k = RotateQK(g, rope, q, k, s.Offset())
	run := g.Lightning
	if q.Dtype() != mlx.Float32 {
		run = g.LightningOps
	}
	y, last := run(heads(q), heads(k), parts[2], decay, s.Slot(slot), h.Scale)
	s.SetSlot(g, slot, last)
	return g.Reshape(y, B, L, h.Width())
}

// GroupRMSNorm normalizes x [..., width] over each of groups equal parts
// of its last axis without a weight, then multiplies by norm's weight over
// the whole width (the weight first, as mlx-lm multiplies). One group is
// the plain RMSNorm.
func GroupRMSNorm(g *mlx.Graph, norm *RMSNorm, x *mlx.Array, groups int) *mlx.Array {
	if groups <= 1 {
		return norm.Apply(g, x)
	}
	shape := x.Shape()
	per := g.Reshape(x, append(shape[:len(shape)-1:len(shape)-1], groups, shape[len(shape)-1]/groups)...)
	x = g.Reshape(g.RMSNorm(per, nil, norm.Eps), shape...)
	return g.Multiply(norm.Weight, x)
}
