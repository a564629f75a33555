package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Classifier is an encoder's scoring head, the one a cross-encoder reranks
// with: each input's final hidden states pooled to one vector (the first
// token's, or the mean of the input's tokens), through a dense layer, its
// activation and a norm where the checkpoint has them (BERT's pooler: dense
// and tanh; ModernBERT's head: dense, GELU and a LayerNorm), then a linear
// layer to one score per label.
type Classifier struct {
	Pool   string     // "cls": the first token's state; "mean": the mean of the input's
	Dense  *Linear    // nil: the pooled state goes on as it is
	Act    string     // Dense's activation: "tanh", "gelu" or "" (none)
	Norm   Normalizer // after the activation; nil: none
	Out    *Linear    // [labels, hidden]
	Labels int
}

// Normalizer is a norm module (RMSNorm, LayerNorm): the classifier's own
// is of its architecture's kind.
type Normalizer interface {
	Apply(g *mlx.Graph, x *mlx.Array) *mlx.Array
}

// ClassifierSpec names a scoring head's parts in the checkpoint, under no
// prefix: a checkpoint's own names.
type ClassifierSpec struct {
	Pool      string // "cls" or "mean"
	Dense     string // the dense layer before the activation ("": none)
	DenseBias bool   // whether Dense has a bias
	Act       string // Dense's activation: "tanh", "gelu" or ""
	Norm      string // the norm after the activation ("": none), loaded by the caller
	Out       string // the output layer, whose rows are the labels
}

// ClassifierPools are the poolings a classifier takes.
var ClassifierPools = []string{"cls", "mean"}

// Classifier loads the scoring head s names, its layers hidden wide, when
// the checkpoint holds s.Out's weight; the caller then loads its norm
// (s.Norm, of the architecture's kind) into the result's Norm. A
// checkpoint without one (an embedding model) has no head: the tensors of
// its dense layer and norm, which only the head reads, are dropped, and
// the result is nil. A pooling other than cls or mean fails the load.
func (w *Weights) Classifier(s ClassifierSpec, hidden int) *Classifier {
	if !w.Holds(s.Out + ".weight") {
		for _, n := range []string{s.Dense, s.Norm} {
			if n != "" {
				w.Drop(n+".weight", n+".bias")
			}
		}
		return nil
	}
	if s.Pool != "cls" && s.Pool != "mean" {
		w.Fail(fmt.Errorf("nn: the classifier %s pools by %q (want cls or mean)", s.Out, s.Pool))
		return nil
	}
	labels := 1
	if !w.l.record {
		labels = w.l.tensors[w.prefix+s.Out+".weight"].Dim(0)
	}
	c := &Classifier{Pool: s.Pool, Act: s.Act, Labels: labels}
	if s.Dense != "" {
		c.Dense = w.Linear(s.Dense, hidden, hidden, s.DenseBias)
	}
	c.Out = w.Linear(s.Out, labels, hidden, true)
	return c
}

// Apply scores h [B, L, hidden], whose row r holds lengths[r] tokens
// before its padding (nil: every row is whole): [B, labels], in float32.
// A nil head fails g: the model has none.
func (c *Classifier) Apply(g *mlx.Graph, h *mlx.Array, lengths []int) *mlx.Array {
	if c == nil {
		g.Failf("nn: the checkpoint has no classifier head to score with (an embedding model, not a cross-encoder)")
		return h
	}
	if g.Err() != nil {
		return h
	}
	if h.Ndim() != 3 || (lengths != nil && len(lengths) != h.Dim(0)) {
		g.Failf("nn: a classifier over hidden states of shape %v with %d lengths (want [B, L, hidden] and B lengths)", h.Shape(), len(lengths))
		return h
	}
	B, D := h.Dim(0), h.Dim(2)
	var x *mlx.Array
	switch c.Pool {
	case "cls":
		x = g.Reshape(g.Slice(h, []int{0, 0, 0}, []int{B, 1, D}), B, D)
	case "mean":
		x = meanOverLengths(g, h, lengths)
	default:
		g.Failf("nn: a classifier pooling by %q", c.Pool)
		return h
	}
	if c.Dense != nil {
		x = c.Dense.Apply(g, x)
		switch c.Act {
		case "tanh":
			x = g.Tanh(x)
		case "gelu":
			x = g.GELU(x)
		case "":
		default:
			g.Failf("nn: a classifier activation %q", c.Act)
		}
	}
	if c.Norm != nil {
		x = c.Norm.Apply(g, x)
	}
	return g.AsType(c.Out.Apply(g, x), mlx.Float32)
}

// meanOverLengths is the mean of each row of h [B, L, D] over its first
// lengths[r] positions (nil: all L), summed in float32 and returned in h's
// dtype: [B, D].
func meanOverLengths(g *mlx.Graph, h *mlx.Array, lengths []int) *mlx.Array {
	B, L := h.Dim(0), h.Dim(1)
	keep := make([]float32, B*L)
	counts := make([]float32, B)
	for r := range B {
		n := L
		if lengths != nil {
			n = min(lengths[r], L)
		}
		for t := range n {
			keep[r*L+t] = 1
		}
		counts[r] = float32(max(n, 1))
	}
	x := g.Multiply(g.AsType(h, mlx.Float32), mlx.FromSlice(g, keep, B, L, 1))
	x = g.Divide(g.Sum(x, false, 1), mlx.FromSlice(g, counts, B, 1))
	return g.AsType(x, h.Dtype())
}

// Count is the head's scores per input; 0 for a nil head (none).
func (c *Classifier) Count() int {
	if c == nil {
		return 0
	}
	return c.Labels
}

// String names the head's parts.
func (c *Classifier) String() string {
	if c == nil {
		return "no classifier"
	}
	return fmt.Sprintf("a classifier to %d labels", c.Labels)
}
