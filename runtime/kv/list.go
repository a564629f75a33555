package kv

import (
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

func (l *List) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	g.Failf("kv: this layer's cache is a list of caches (List): its layer makes masks from a part")
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
