package nn

import (
	"slices"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// AddPositions adds to h [B, L, hidden] the rows of table (a learned table
// of absolute positions, GPT-2's wpe) for its tokens' positions: from c's
// offset on, or, in a step of a batch (kv.RowOffsets, bound by the batch's
// mask), from each row's own. A position past the table's rows fails on g,
// naming both, where the lookup would read past the table.
func AddPositions(g *mlx.Graph, h *mlx.Array, table *Embedding, c kv.Cache) *mlx.Array {
	if g.Err() != nil {
		return h
	}
	if h.Ndim() != 3 {
		g.Failf("nn: positions for hidden states of shape %v (want [B, L, hidden])", h.Shape())
		return h
	}
	B, L := h.Dim(0), h.Dim(1)
	rows := table.rows()
	offsets := kv.RowOffsets(g)
	if len(offsets) != B {
		offsets = nil
	}
	last := c.Offset() // the furthest row's offset
	if offsets != nil {
		last = slices.Max(offsets)
	}
	if last+L > rows {
		g.Failf("nn: position %d is past the %d positions the model's table holds (its n_positions)", last+L-1, rows)
		return h
	}
	if offsets == nil {
		ids := g.Arange(float64(last), float64(last+L), 1, mlx.Int32)
		return g.Add(h, table.Apply(g, ids)) // [L, hidden], the same for every row
	}
	at := make([]int32, 0, B*L)
	for _, o := range offsets {
		for j := range L {
			at = append(at, int32(o+j))
		}
	}
	return g.Add(h, table.Apply(g, mlx.FromSlice(g, at, B, L)))
}

// rows is the table's row count.
func (e *Embedding) rows() int {
	if e.Q != nil {
		return e.Q.Weight.Dim(0)
	}
	return e.Weight.Dim(0)
}

// AddTokenTypes adds to h [B, L, hidden] the row of table for each token's
// type, which an encoder's caches carry (kv.Encoding: the segment of a
// pair of texts); with no types every token is of type 0. A type past the
// table's rows fails g.
func AddTokenTypes(g *mlx.Graph, h *mlx.Array, table *Embedding, c kv.Cache) *mlx.Array {
	if g.Err() != nil {
		return h
	}
	if h.Ndim() != 3 {
		g.Failf("nn: token types for hidden states of shape %v (want [B, L, hidden])", h.Shape())
		return h
	}
	B, L := h.Dim(0), h.Dim(1)
	var types []int32
	if e, ok := c.(*kv.Encoding); ok {
		types = e.Types()
	}
	if types == nil {
		return g.Add(h, table.Apply(g, g.Zeros([]int{1, 1}, mlx.Int32)))
	}
	if len(types) != B*L {
		g.Failf("nn: %d token types for %d rows of %d tokens", len(types), B, L)
		return h
	}
	rows := table.rows()
	for i, t := range types {
		if t < 0 || int(t) >= rows {
			g.Failf("nn: token %d of row %d has type %d; the model's table holds %d types", i%L, i/L, t, rows)
			return h
		}
	}
	return g.Add(h, table.Apply(g, mlx.FromSlice(g, types, B, L)))
}

// AddPaddedPositions adds to h [B, L, hidden] the rows of table for
// positions counted as RoBERTa counts them from the token ids [B, L]: each
// token that is not pad gets pad plus its count among its row's tokens
// that are not pad (pad+1, pad+2, ...), and each pad token the position
// pad. A position past the table's rows fails g, naming the longest input
// the table takes.
func AddPaddedPositions(g *mlx.Graph, h, tokens *mlx.Array, table *Embedding, pad int) *mlx.Array {
	if g.Err() != nil {
		return h
	}
	if h.Ndim() != 3 || tokens.Ndim() != 2 {
		g.Failf("nn: positions for hidden states of shape %v and tokens %v (want [B, L, hidden] and [B, L])", h.Shape(), tokens.Shape())
		return h
	}
	L := h.Dim(1)
	if rows := table.rows(); pad+L >= rows {
		g.Failf("nn: %d tokens reach position %d, past the %d positions the model's table holds (inputs of at most %d tokens)", L, pad+L, rows, rows-pad-1)
		return h
	}
	real := g.AsType(g.NotEqual(tokens, g.Scalar(float64(pad), tokens.Dtype())), mlx.Int32) // [B, L]
	ids := g.AddScalar(g.Multiply(g.Cumsum(real, 1, false, true), real), float64(pad))
	return g.Add(h, table.Apply(g, ids))
}
