package nn

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// Linear is y = x W^T + b: mlx's nn.Linear, or nn.QuantizedLinear when its
// weight is quantized. Exactly one of Weight, Q and Parts is set; Bias may
// be nil.
type Linear struct {
	Weight *mlx.Array     // [out, in], dense
	Q      *mlx.Quantized // the quantized [out, in] matrix
	Bias   *mlx.Array     // [out] or nil
	// Parts hold W's rows as layers of their own (stored in different
	// forms): y is their outputs joined, one after another, or, with
	// PartGroups > 1, in that many groups, each holding every part's
	// share in turn.
	Parts      []*Linear
	PartGroups int
	// Sum, when set, is the group over which the layer's input columns are
	// split (ShardedToAll): the partial products are summed over it before
	// the bias is added.
	Sum *mlx.Group
}

// Apply is the layer on x [..., in]: [..., out].
func (l *Linear) Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	if l.Sum != nil {
		return l.applySum(g, x)
	}
	if l.Parts != nil {
		return l.applyParts(g, x)
	}
	if l.Q != nil {
		y := g.QuantizedMatmul(x, *l.Q, true)
		if l.Bias != nil {
			y = g.Add(y, l.Bias)
		}
		return y
	}
	if l.Bias != nil {
		if x.Dtype() != l.Weight.Dtype() || x.Dtype() == mlx.Float32 {
			// a float32 x against a weight kept in half precision: the
			// product reads it as stored (libmlx's addmm would widen a
			// copy of it first), then the bias; in float32 too, where the
			// product runs on archgen's kernel as a layer without a bias
			// does (libmlx's addmm runs its BLAS, many times slower on
			// many rows: BERT's layers all have biases). In half
			// precision addmm keeps libmlx's rounding.
			return g.Add(g.Linear(x, l.Weight), l.Bias)
		}
		return g.Addmm(l.Bias, x, g.Transpose(l.Weight), 1, 1)
	}
	return g.Linear(x, l.Weight)
}

// applyParts is Apply for a layer held as parts: each part's product,
// joined along the last axis (in groups: each reshaped to [..., groups,
// rows / groups] and joined on the last axis, then flattened), plus the
// bias.
func (l *Linear) applyParts(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	ys := make([]*mlx.Array, len(l.Parts))
	out := 0
	for i, p := range l.Parts {
		ys[i] = p.Apply(g, x)
		out += ys[i].Dim(-1)
	}
	var y *mlx.Array
	if groups := l.PartGroups; groups > 1 {
		for i, yi := range ys {
			sh := yi.Shape()
			ys[i] = g.Reshape(yi, append(sh[:len(sh)-1:len(sh)-1], groups, sh[len(sh)-1]/groups)...)
		}
		sh := ys[0].Shape()
		y = g.Reshape(g.Concatenate(-1, ys...), append(sh[:len(sh)-2:len(sh)-2], out)...)
	} else {
		y = g.Concatenate(-1, ys...)
	}
	if l.Bias != nil {
		y = g.Add(y, l.Bias)
	}
	return y
}

// applySum is Apply for a layer whose input columns are split over l.Sum:
// this process's partial product, summed over the group, plus the bias.
func (l *Linear) applySum(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	var y *mlx.Array
	if l.Q != nil {
		y = g.QuantizedMatmul(x, *l.Q, true)
	} else {
		y = g.Linear(x, l.Weight)
	}
	y = g.AllSum(y, l.Sum)
	if l.Bias != nil {
		y = g.Add(y, l.Bias)
	}
	return y
}

// Embedding maps token ids to rows of its table: mlx's nn.Embedding, or
// nn.QuantizedEmbedding when the table is quantized (exactly one of Weight
// and Q is set).
type Embedding struct {
	Weight *mlx.Array     // [vocab, dims], dense
	Q      *mlx.Quantized // the quantized [vocab, dims] table
	// Out, when a float dtype, is the dtype the rows come out in (the
	// compute dtype, where the table stays stored in another); otherwise
	// they come out in the table's own.
	Out mlx.Dtype
}

// Apply looks up ids (any shape): [ids..., dims].
func (e *Embedding) Apply(g *mlx.Graph, ids *mlx.Array) *mlx.Array {
	if e.Q != nil {
		if mlx.IsBlockMode(e.Q.Mode) {
			// llama.cpp's blocks: the picked rows decoded in the compute dtype
			q := *e.Q
			q.Weight = g.Take(e.Q.Weight, ids, 0)
			return g.Dequantize(q, e.Dtype())
		}
		q := mlx.Quantized{
			Weight:    g.Take(e.Q.Weight, ids, 0),
			Scales:    g.Take(e.Q.Scales, ids, 0),
			GroupSize: e.Q.GroupSize,
			Bits:      e.Q.Bits,
			Mode:      e.Q.Mode,
		}
		if e.Q.Biases == nil {
			// a floating-point mode (uint8 scales): the rows come out in
			// MLX's default dtype for it, as mlx's QuantizedEmbedding has them
			return e.out(g, g.Dequantize(q, mlx.Dtype(255)))
		}
		q.Biases = g.Take(e.Q.Biases, ids, 0)
		if dt := e.Dtype(); dt != q.Scales.Dtype() {
			// libmlx dequantizes in the scales' dtype and casts after: the
			// picked rows' scales and biases are widened first, so that
			// the rows are computed in the compute dtype
			q.Scales, q.Biases = g.AsType(q.Scales, dt), g.AsType(q.Biases, dt)
		}
		return g.Dequantize(q, e.Dtype())
	}
	return e.out(g, g.Take(e.Weight, ids, 0))
}

// out is rows in the dtype Out asks for.
func (e *Embedding) out(g *mlx.Graph, rows *mlx.Array) *mlx.Array {
	if e.Out.IsFloat() && rows.Dtype() != e.Out {
		return g.AsType(rows, e.Out)
	}
	return rows
}

// AsLinear is the table used as the output projection of a tied head,
// x @ table^T, quantized when the table is (mlx's as_linear).
func (e *Embedding) AsLinear() *Linear {
	return &Linear{Weight: e.Weight, Q: e.Q}
}
