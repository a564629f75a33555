package nn

import "github.com/archgen/archgen/runtime/mlx"

// XieLU is the activation with learned parameters: for x > 0,
// ap*x² + beta*x, else (expm1(min(x, eps)) - x)*an + beta*x, where
// ap = softplus(AlphaP) and an = beta + softplus(AlphaN). Each parameter
// is a scalar (a checkpoint may store AlphaP and AlphaN as [1]).
type XieLU struct {
	AlphaP, AlphaN, Beta, Eps *mlx.Array
}

// Apply is the activation of x, elementwise.
func (a *XieLU) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	ap := g.Softplus(a.AlphaP)
	an := g.Add(a.Beta, g.Softplus(a.AlphaN))
	bx := g.Multiply(a.Beta, x)
	pos := g.Add(g.Multiply(ap, g.Square(x)), bx)
	neg := g.Add(g.Multiply(g.Subtract(g.Expm1(g.Minimum(x, a.Eps)), x), an), bx)
	return g.Where(g.Greater(x, g.Scalar(0, x.Dtype())), pos, neg)
}

// XieLU is the activation name: its scalars name.alpha_p, name.alpha_n,
// name.beta and name.eps, each of shape [] or [1] (read as a scalar).
func (w *Weights) XieLU(name string) *XieLU {
	return &XieLU{
		AlphaP: w.scalarParam(name + ".alpha_p"),
		AlphaN: w.scalarParam(name + ".alpha_n"),
		Beta:   w.scalarParam(name + ".beta"),
		Eps:    w.scalarParam(name + ".eps"),
	}
}

// scalarParam is the parameter name, a scalar stored as [] or [1].
func (w *Weights) scalarParam(name string) *mlx.Array {
	if w.l.record {
		w.spec(name, []int{}, nil, false)
		return nil
	}
	shape := []int{}
	if a, ok := w.l.tensors[w.prefix+name]; ok && a.Ndim() == 1 {
		shape = []int{1}
	}
	a := w.take(name, shape, false)
	if a == nil {
		return nil
	}
	if len(shape) == 1 {
		a = w.l.g.Reshape(a, []int{}...)
		w.l.g.Keep(a)
	}
	return w.keep(a)
}
