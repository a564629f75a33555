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
