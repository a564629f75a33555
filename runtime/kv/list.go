package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// List is the cache of a layer that keeps several (mlx-lm's CacheList): an
// attention's keys and values beside a recurrent state, in a layer that
// runs both (Falcon-H1's), or a latent cache beside an indexer's keys. The
// layer reads its parts with Part; the list itself holds no keys and
// values, so Update and Mask fail the graph as States's do.
type List struct {
	parts []Cache
}

// NewList makes a list of parts, which it then owns.
func NewList(parts ...Cache) *List { return &List{parts: parts} }

// Parts is the number of parts.
func (l *List) Parts() int { return len(l.parts) }

// Part is part i.
func (l *List) Part(i int) Cache { return l.parts[i] }

// Offset is the largest of the parts' (mlx-lm's size()).
func (l *List) Offset() int {
	n := 0
	for _, p := range l.parts {
		n = max(n, p.Offset())
	}
	return n
}

func (l *List) Update(g *mlx.Graph, keys, values *mlx.Array) KV {
	g.Failf("kv: this layer's cache is a list of caches (List): its layer reads each part")
	return KV{Keys: keys, Values: values}
}

// Mask is the mask of its first part that makes one (a recurrent state
// does not): the attention beside a recurrent mixer, as mlx-lm masks a
// CacheList's layer by its KV part.
func (l *List) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	for _, p := range l.parts {
		if _, state := p.(interface{ Slots() int }); !state {
			return p.Mask(g, n, window, forceArray)
		}
	}
	g.Failf("kv: this layer's cache is a list of caches (List) none of which makes a mask")
	return mlx.AttentionMask{}
}

// Trimmable reports whether every part is.
func (l *List) Trimmable() bool {
	for _, p := range l.parts {
		if !p.Trimmable() {
			return false
		}
	}
	return len(l.parts) > 0
}

// Trim trims every part when all can be trimmed, and returns what the
// last trimmed; 0 otherwise.
func (l *List) Trim(n int) int {
	if !l.Trimmable() {
		return 0
	}
	m := 0
	for _, p := range l.parts {
		m = p.Trim(n)
	}
	return m
}

func (l *List) Nbytes() int {
	n := 0
	for _, p := range l.parts {
		n += p.Nbytes()
	}
	return n
}

// Free frees every part.
func (l *List) Free() {
	for _, p := range l.parts {
		p.Free()
	}
}

// A List batches part by part: each part's rows are its kind's (a Batched
// of keys and values, a States of slots), and the list's rows are theirs.

// Rows is the number of sequences (its first part's).
func (l *List) Rows() int {
	if len(l.parts) == 0 {
		return 0
	}
	if r, ok := l.parts[0].(Rows); ok {
		return r.Rows()
	}
	return 1
}

// partRows is part i as a batch, or an error naming it.
func (l *List) partRows(i int) (Rows, error) {
	r, ok := l.parts[i].(Rows)
	if !ok {
		return nil, fmt.Errorf("kv: part %d of a list, a %T, is no batch", i, l.parts[i])
	}
	return r, nil
}

// Extend appends other's rows (a List of as many parts) after l's, part by
// part; other is left as it was.
func (l *List) Extend(g *mlx.Graph, with Rows) error {
	other, ok := with.(*List)
	if !ok || len(other.parts) != len(l.parts) {
		return fmt.Errorf("kv: extending a list of %d caches with a %T", len(l.parts), with)
	}
	for i := range l.parts {
		mine, err := l.partRows(i)
		if err != nil {
			return err
		}
		theirs, err := other.partRows(i)
		if err != nil {
			return err
		}
		if err := mine.Extend(g, theirs); err != nil {
			return fmt.Errorf("kv: part %d: %w", i, err)
		}
	}
	return nil
}

// RowCapacity is the most rows a part holds room for.
func (l *List) RowCapacity() int {
	n := 0
	for _, p := range l.parts {
		if r, ok := p.(Rows); ok {
			n = max(n, r.RowCapacity())
		}
	}
	return n
}

// ReserveRows makes room for rows sequences in every part.
func (l *List) ReserveRows(g *mlx.Graph, rows int) error {
	return l.eachPart(func(r Rows) error { return r.ReserveRows(g, rows) })
}

// Filter keeps the given rows of every part, in that order.
func (l *List) Filter(g *mlx.Graph, keep []int) error {
	return l.eachPart(func(r Rows) error { return r.Filter(g, keep) })
}

// eachPart runs f on every part as a batch, naming the part that fails.
func (l *List) eachPart(f func(Rows) error) error {
	for i := range l.parts {
		r, err := l.partRows(i)
		if err != nil {
			return err
		}
		if err := f(r); err != nil {
			return fmt.Errorf("kv: part %d: %w", i, err)
		}
	}
	return nil
}

// Extract is row r as a list of single-sequence parts.
func (l *List) Extract(g *mlx.Graph, r int) (Cache, error) {
	parts := make([]Cache, len(l.parts))
	for i := range l.parts {
		rows, err := l.partRows(i)
		if err == nil {
			parts[i], err = rows.Extract(g, r)
		}
		if err != nil {
			for _, p := range parts[:i] {
				p.Free()
			}
			return nil, err
		}
	}
	return NewList(parts...), nil
}

// mergeRows makes a batch of lists, one sequence each: each part merged
// with the same part of the others.
func (l *List) mergeRows(g *mlx.Graph, caches []Cache) (Rows, error) {
	merged := make([]Cache, len(l.parts))
	for i := range l.parts {
		parts := make([]Cache, len(caches))
		for k, c := range caches {
			o, ok := c.(*List)
			if !ok || len(o.parts) != len(l.parts) {
				return nil, fmt.Errorf("kv: cache %d: a %T among lists of %d caches", k, c, len(l.parts))
			}
			parts[k] = o.parts[i]
		}
		m, err := MergeRows(g, parts)
		if err != nil {
			return nil, fmt.Errorf("kv: part %d: %w", i, err)
		}
		merged[i] = m
	}
	return NewList(merged...), nil
}

// clone copies every part.
func (l *List) clone(g *mlx.Graph) (Cache, error) {
	parts := make([]Cache, len(l.parts))
	for i, p := range l.parts {
		c, err := Clone(g, p)
		if err != nil {
			for _, q := range parts[:i] {
				q.Free()
			}
			return nil, err
		}
		parts[i] = c
	}
	return NewList(parts...), nil
}
