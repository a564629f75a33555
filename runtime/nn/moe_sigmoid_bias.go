package nn

import "github.com/archgen/archgen/runtime/mlx"

// sigmoidBias is RouteSigmoidBias's choice for x [..., D]: the router runs
// on x widened to float32 (a quantized router then multiplies in float32
// too), the correction bias only reorders the experts, and the weights
// come back in x's dtype.
func (r *Router) sigmoidBias(g *mlx.Graph, x *mlx.Array) (idx, weights *mlx.Array) {
	p := g.Sigmoid(r.Gate.Apply(g, g.AsType(x, mlx.Float32)))
	idx = r.topK(g, g.Add(p, r.Bias))
	weights = g.TakeAlongAxis(p, idx, -1)
	weights = g.Divide(weights, g.AddScalar(g.Sum(weights, true, -1), 1e-20))
	return idx, g.AsType(weights, x.Dtype())
}
