package nn

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Classifier is an encoder's scoring head, the one a cross-encoder reranks
// with: the first token's final hidden state, through a dense layer and an
// activation where the checkpoint has one (BERT's pooler: dense and tanh),
// then a linear layer to one score per label.
type Classifier struct {
	Dense  *Linear // nil: the first token's state goes to Out as it is
	Act    string  // Dense's activation: "tanh", "gelu" or "" (none)
	Out    *Linear // [labels, hidden]
	Labels int
}

// Classifier loads the scoring head out (a linear layer whose rows are the
// labels, under no prefix: a checkpoint's own name) with the dense layer
// before it ("" for none), when the checkpoint holds out.weight. A checkpoint
// without one (an embedding model) has no head: its dense layer's tensors,
// which only the head reads, are dropped, and the result is nil.
func (w *Weights) Classifier(dense, act, out string, hidden int) *Classifier {
	if !w.Holds(out + ".weight") {
		if dense != "" {
			w.Drop(dense + ".weight")
			w.Drop(dense + ".bias")
		}
		return nil
	}
	labels := 1
	if !w.l.record {
		labels = w.l.tensors[w.prefix+out+".weight"].Dim(0)
	}
	c := &Classifier{Act: act, Labels: labels}
	if dense != "" {
		c.Dense = w.Linear(dense, hidden, hidden, true)
	}
	c.Out = w.Linear(out, labels, hidden, true)
	return c
}

// Apply scores h [B, L, hidden] by its rows' first tokens: [B, labels], in
// float32. A nil head fails g: the model has none.
func (c *Classifier) Apply(g *mlx.Graph, h *mlx.Array) *mlx.Array {
	if c == nil {
		g.Failf("nn: the checkpoint has no classifier head to score with (an embedding model, not a cross-encoder)")
		return h
	}
	if g.Err() != nil {
		return h
	}
	if h.Ndim() != 3 {
		g.Failf("nn: a classifier over hidden states of shape %v (want [B, L, hidden])", h.Shape())
		return h
	}
	B, D := h.Dim(0), h.Dim(2)
	x := g.Reshape(g.Slice(h, []int{0, 0, 0}, []int{B, 1, D}), B, D)
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
	return g.AsType(c.Out.Apply(g, x), mlx.Float32)
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
