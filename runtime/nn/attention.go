package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// SoftcapAttention is attention with soft-capped scores, written out (MLX's
// fused kernel has no cap) from the kv package's pieces, so it reads every
// cache kind, quantized ones included: q [B, Hq, L, D] is scaled, scored
// against the keys (kv.Scores), the scores capped to tanh(s / cap) * cap,
// masked (kv.MaskScores), normalized in float32 precision and mixed with
// the values (kv.Mix); [B, Hq, L, D]. Gemma 2 attends so.
func SoftcapAttention(g *mlx.Graph, q *mlx.Array, kvs kv.KV, scale, cap float64, mask mlx.AttentionMask) *mlx.Array {
	scores := kv.Scores(g, g.MultiplyScalar(q, scale), kvs)
	scores = kv.MaskScores(g, Softcap(g, scores, cap), mask)
	return kv.Mix(g, g.Softmax(scores, true, -1), kvs)
}

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
