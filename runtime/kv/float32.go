package kv

import "github.com/archgen/archgen/runtime/mlx"

// AttentionFloat32 is Attention computed in float32: the queries, keys and
// values are cast to float32 (MLX would promote the values to the others'
// dtype anyway), and the result is cast back to the dtype the values are
// stored in (the queries' over a quantized cache). mlx-lm makes this cast
// in the models that need the precision; at float32 it changes nothing.
func AttentionFloat32(g *mlx.Graph, q *mlx.Array, kv KV, scale float32, mask mlx.AttentionMask) *mlx.Array {
	q32 := g.AsType(q, mlx.Float32)
	if kv.QKeys != nil {
		return g.AsType(quantizedAttention(g, q32, kv, scale, mask, nil), q.Dtype())
	}
	dt := kv.Values.Dtype()
	return g.AsType(g.SDPA(q32, g.AsType(kv.Keys, mlx.Float32), g.AsType(kv.Values, mlx.Float32), scale, mask), dt)
}

// AttentionFloat32IfHalf is AttentionFloat32 when q is float16 and
// Attention otherwise: mlx-lm makes the cast in some models only for
// float16, whose range the scores can exceed.
func AttentionFloat32IfHalf(g *mlx.Graph, q *mlx.Array, kv KV, scale float32, mask mlx.AttentionMask) *mlx.Array {
	if q.Dtype() == mlx.Float16 {
		return AttentionFloat32(g, q, kv, scale, mask)
	}
	return Attention(g, q, kv, scale, mask)
}
