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
// sigmoid of its gate logit (logits [B, L, heads]), the sigmoid taken in
// float32 and cast to o's dtype.
func HeadGate(g *mlx.Graph, o, logits *mlx.Array) *mlx.Array {
	gate := g.AsType(g.Sigmoid(g.AsType(logits, mlx.Float32)), o.Dtype())
	return g.Multiply(o, g.ExpandDims(gate, -1))
}
