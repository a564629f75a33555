package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// States is the cache of a recurrent layer, mlx-lm's ArraysCache: a fixed
// number of slots, each one array [B, ...] that the layer replaces whole
// at every step (a short convolution's last inputs, a recurrence's state),
// or nil for a fresh sequence, which the layer reads as zeros. Its size
// does not grow with the sequence. It holds no positions, so it cannot be
// trimmed; Offset counts the tokens the layer has consumed (Advance).
//
// A States has no keys and values: Update and Mask fail the graph, so that
// a model that hands one to an attention layer learns it at Eval.
type States struct {
	slots  []*mlx.Array
	offset int
}

// NewStates makes an empty cache of n slots.
func NewStates(n int) *States { return &States{slots: make([]*mlx.Array, n)} }

// Slots is the number of slots.
func (c *States) Slots() int { return len(c.slots) }

// Slot is slot i's array, nil while empty. It is valid until the next
// SetSlot of i or Free.
func (c *States) Slot(i int) *mlx.Array { return c.slots[i] }

// SetSlot makes a slot i's array, taking it over from g (as a cache keeps
// the arrays of its steps); the array it replaces is released. nil empties
// the slot.
func (c *States) SetSlot(g *mlx.Graph, i int, a *mlx.Array) {
	if old := c.slots[i]; old != nil && old != a {
		old.Free()
	}
	if a != nil {
		g.Keep(a)
	}
	c.slots[i] = a
}

// Advance records that the layer consumed n more tokens.
func (c *States) Advance(n int) { c.offset += n }

// Empty reports whether the first slot is empty, as mlx-lm's empty() does:
// the cache has seen no token.
func (c *States) Empty() bool { return len(c.slots) == 0 || c.slots[0] == nil }

func (c *States) Offset() int { return c.offset }

func (c *States) Update(g *mlx.Graph, keys, values *mlx.Array) KV {
	g.Failf("kv: this layer's cache is a recurrent state (States), which holds no keys and values")
	return KV{Keys: keys, Values: values}
}

func (c *States) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	g.Failf("kv: this layer's cache is a recurrent state (States), which makes no attention mask")
	return mlx.AttentionMask{}
}

// Trim drops nothing: a state holds no positions.
func (c *States) Trim(n int) int { return 0 }

func (c *States) Trimmable() bool { return false }

func (c *States) Nbytes() int {
	n := 0
	for _, a := range c.slots {
		if a != nil {
			n += a.Nbytes()
		}
	}
	return n
}

// Free releases the slots' arrays; the cache is empty afterwards.
func (c *States) Free() {
	for i, a := range c.slots {
		if a != nil {
			a.Free()
		}
		c.slots[i] = nil
	}
	c.offset = 0
}

// rows is the batch size the slots hold, 0 when every slot is empty.
func (c *States) rows() int {
	for _, a := range c.slots {
		if a != nil {
			return a.Dim(0)
		}
	}
	return 0
}

// MergeStates stacks caches of one layer, each of its own sequences, into
// one cache of all their rows in order, as mlx-lm's ArraysCache.merge and
// extend do: a slot empty in some parts and not others is zeros there. Its
// Offset is the largest of the parts'. The parts are left as they were.
func MergeStates(g *mlx.Graph, parts []*States) (*States, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("kv: no caches to merge")
	}
	n := len(parts[0].slots)
	out := NewStates(n)
	for _, p := range parts {
		if len(p.slots) != n {
			return nil, fmt.Errorf("kv: merging caches of %d and %d slots", n, len(p.slots))
		}
		out.offset = max(out.offset, p.offset)
	}
	for i := range n {
		var like *mlx.Array
		for _, p := range parts {
			if p.slots[i] != nil {
				like = p.slots[i]
				break
			}
		}
		if like == nil {
			continue
		}
		rows := make([]*mlx.Array, len(parts))
		for j, p := range parts {
			a := p.slots[i]
			if a == nil {
				shape := like.Shape()
				shape[0] = max(p.rows(), 1)
				a = g.Zeros(shape, like.Dtype())
			} else if a.Ndim() != like.Ndim() || a.Dtype() != like.Dtype() || fmt.Sprint(a.Shape()[1:]) != fmt.Sprint(like.Shape()[1:]) {
				return nil, fmt.Errorf("kv: merging slot %d: %s %v beside %s %v", i, a.Dtype(), a.Shape(), like.Dtype(), like.Shape())
			}
			rows[j] = a
		}
		out.SetSlot(g, i, g.Concatenate(0, rows...))
	}
	if err := g.Err(); err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// Rows is the number of sequences the slots hold (0 while empty).
func (c *States) Rows() int { return c.rows() }

// RowCapacity is Rows: a step replaces the states whole, each of as many
// rows as the step.
func (c *States) RowCapacity() int { return c.rows() }

// ReserveRows does nothing: states are made anew each step.
func (c *States) ReserveRows(*mlx.Graph, int) error { return nil }

// Extend appends the rows of other (a States of as many slots) after c's,
// as mlx-lm's ArraysCache.extend does; other is left as it was.
func (c *States) Extend(g *mlx.Graph, with Rows) error {
	other, ok := with.(*States)
	if !ok {
		return fmt.Errorf("kv: extending a batch of states with a %T", with)
	}
	both, err := MergeStates(g, []*States{c, other})
	if err != nil {
		return err
	}
	for i := range c.slots {
		c.SetSlot(g, i, both.slots[i])
	}
	c.offset = both.offset
	return nil
}

// Filter keeps the given rows of every slot, in that order (mlx-lm's
// filter).
func (c *States) Filter(g *mlx.Graph, rows []int) error {
	n := c.rows()
	idx := make([]int32, len(rows))
	for i, r := range rows {
		if r < 0 || (n > 0 && r >= n) {
			return fmt.Errorf("kv: row %d of a batch of %d", r, n)
		}
		idx[i] = int32(r)
	}
	for i, a := range c.slots {
		if a != nil {
			c.SetSlot(g, i, g.Take(a, mlx.FromSlice(g, idx, len(idx)), 0))
		}
	}
	return g.Err()
}

// Extract is a new cache of row r alone (mlx-lm's extract).
func (c *States) Extract(g *mlx.Graph, r int) (Cache, error) {
	if n := c.rows(); r < 0 || (n > 0 && r >= n) {
		return nil, fmt.Errorf("kv: row %d of a batch of %d", r, n)
	}
	out := NewStates(len(c.slots))
	out.offset = c.offset
	for i, a := range c.slots {
		if a != nil {
			start, stop := make([]int, a.Ndim()), a.Shape()
			start[0], stop[0] = r, r+1
			out.SetSlot(g, i, g.Slice(a, start, stop))
		}
	}
	return out, g.Err()
}

// clone is a copy of c that owns its arrays: stepping either leaves the
// other as it was.
func (c *States) clone(g *mlx.Graph) (Cache, error) {
	out := NewStates(len(c.slots))
	out.offset = c.offset
	for i, a := range c.slots {
		if a != nil {
			out.SetSlot(g, i, g.Contiguous(a))
		}
	}
	if err := g.Err(); err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

func (c *States) mergeRows(g *mlx.Graph, caches []Cache) (Rows, error) {
	parts := make([]*States, len(caches))
	for i, x := range caches {
		s, ok := x.(*States)
		if !ok {
			return nil, fmt.Errorf("kv: cache %d: a %T among state caches", i, x)
		}
		parts[i] = s
	}
	return MergeStates(g, parts)
}
