package kv

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// causalMask is mlx-lm's create_attention_mask for n queries after offset
// positions: an explicit array whenever a window is set, none for one
// query, and the "causal" mode otherwise unless an array is asked for.
func causalMask(g *mlx.Graph, n, offset, window int, forceArray bool) mlx.AttentionMask {
	switch {
	case window > 0:
		return mlx.MaskArray(CausalMaskArray(g, n, offset, window))
	case n == 1:
		return mlx.NoMask
	case forceArray:
		return mlx.MaskArray(CausalMaskArray(g, n, offset, 0))
	}
	return mlx.CausalMask
}

// CausalMaskArray is the boolean mask [n, offset+n] where query i (at
// position offset+i) attends to key j when j <= offset+i and, with a window
// w > 0, j > offset+i-w (mlx-lm's create_causal_mask).
func CausalMaskArray(g *mlx.Graph, n, offset, window int) *mlx.Array {
	rinds := g.Arange(0, float64(offset+n), 1, mlx.Int32)
	linds := g.Arange(float64(offset), float64(offset+n), 1, mlx.Int32)
	l := g.ExpandDims(linds, 1)
	r := g.ExpandDims(rinds, 0)
	mask := g.GreaterEqual(l, r)
	if window > 0 {
		mask = g.LogicalAnd(mask, g.Less(l, g.AddScalar(r, float64(window))))
	}
	return mask
}

// ringMask is the mask of one query over a rotating cache of maxSize
// positions attended with a shorter window, as mlx-lm's make_mask gives it:
// over the size = min(offset+1, maxSize) slots the step will read, true for
// the window newest in temporal order (positions size-window.. of it), laid
// out in ring order by a right roll of idx+1 (idx, the next write slot,
// counted as 0 once it reaches maxSize).
func ringMask(g *mlx.Graph, offset, idx, maxSize, window int) *mlx.Array {
	if idx >= maxSize {
		idx = 0
	}
	size := maxSize
	if offset < maxSize {
		size = offset + 1
	}
	shift := idx + 1
	m := make([]bool, size)
	for j := range m {
		// A right roll by shift puts entry t of the unrolled mask at slot
		// (t + shift) mod size.
		t := ((j-shift)%size + size) % size
		m[j] = t >= size-window
	}
	return mlx.FromSlice(g, m, size)
}

// PromptMask is the mask of n queries that attend to one another only, with
// no cache (mlx-lm's create_attention_mask without one): none for one
// query, the "causal" mode unless a window shorter than n binds or
// forceArray asks for an array, else the boolean array [n, n].
func PromptMask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	switch {
	case n == 1:
		return mlx.NoMask
	case forceArray || (window > 0 && n > window):
		return mlx.MaskArray(CausalMaskArray(g, n, 0, window))
	}
	return mlx.CausalMask
}
