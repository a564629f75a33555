package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// SeqLen is L of tokens [B, L], recording an error on g when tokens is not
// a 2-D integer array.
func SeqLen(g *mlx.Graph, tokens *mlx.Array) int {
	dt := tokens.Dtype()
	if tokens.Ndim() != 2 || dt.IsFloat() || dt == mlx.Bool || !dt.Valid() {
		g.Fail(fmt.Errorf("nn: tokens are %s; want [B, L] integers", tokens))
		return 0
	}
	return tokens.Dim(1)
}

// HeadGate is o [B, L, heads, head_dim] with each head multiplied by the
// sigmoid of its gate logit (gate(x) [B, L, heads]), the sigmoid taken in
// float32 and cast to o's dtype. A nil gate (a layer or config without
// one) leaves o as it is.
func HeadGate(g *mlx.Graph, o *mlx.Array, gate *Linear, x *mlx.Array) *mlx.Array {
	if gate == nil {
		return o
	}
	return headGate(g, o, g.Sigmoid(g.AsType(gate.Apply(g, x), mlx.Float32)))
}

// HeadGateSoftplus is HeadGate with softplus(logit), log(1 + e^logit), for
// the sigmoid.
func HeadGateSoftplus(g *mlx.Graph, o *mlx.Array, gate *Linear, x *mlx.Array) *mlx.Array {
	if gate == nil {
		return o
	}
	return headGate(g, o, g.Softplus(g.AsType(gate.Apply(g, x), mlx.Float32)))
}

// headGate is o times each head's float32 gate [B, L, heads], cast to o's
// dtype.
func headGate(g *mlx.Graph, o, gate *mlx.Array) *mlx.Array {
	return g.Multiply(o, g.ExpandDims(g.AsType(gate, o.Dtype()), -1))
}

// GroupTiledHeads reorders q [B, heads, L, head_dim], whose heads read
// key-value heads tiled across them (head h reads h mod kvHeads, mlx's
// tile of the keys), so that grouped-query attention, which gives head p
// key-value head p / (heads / kvHeads), pairs each with its own: position
// j * n + a takes head a * kvHeads + j (n = heads / kvHeads).
// UngroupTiledHeads puts the attention's output back in the heads' order.
func GroupTiledHeads(g *mlx.Graph, q *mlx.Array, kvHeads int) *mlx.Array {
	return g.Take(q, tiledOrder(g, q, kvHeads, false), 1)
}

// UngroupTiledHeads is GroupTiledHeads undone on o [B, heads, L, head_dim]:
// head a * kvHeads + j from position j * n + a.
func UngroupTiledHeads(g *mlx.Graph, o *mlx.Array, kvHeads int) *mlx.Array {
	return g.Take(o, tiledOrder(g, o, kvHeads, true), 1)
}

// tiledOrder is GroupTiledHeads' order of x's heads (axis 1), or with
// back the inverse one.
func tiledOrder(g *mlx.Graph, x *mlx.Array, kvHeads int, back bool) *mlx.Array {
	if !x.Valid() || kvHeads < 1 {
		return x // a failed op's result: g reports its error
	}
	heads := x.Dim(1)
	n := heads / kvHeads
	idx := make([]int32, heads)
	for p := range idx {
		if back {
			idx[p] = int32((p%kvHeads)*n + p/kvHeads)
		} else {
			idx[p] = int32((p%n)*kvHeads + p/n)
		}
	}
	return mlx.FromSlice(g, idx, heads)
}
