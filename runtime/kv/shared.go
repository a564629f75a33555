package kv

import "github.com/archgen/archgen/runtime/mlx"

// Keys and values shared across layers: a later layer that computes no
// keys or values of its own attends over those an earlier layer stored in
// the same forward pass. The earlier layer's cache is wrapped in an Owner,
// which remembers what its Update returned this step and the offset it
// started from; each later layer gets a Reader of it, which keeps nothing
// and is not among the model's caches (it is made for each forward pass).

// Owner is a layer's cache whose keys and values later layers read.
type Owner struct {
	Cache
	kv     KV
	offset int
	stored bool
}

// NewOwner wraps c.
func NewOwner(c Cache) *Owner { return &Owner{Cache: c} }

// Update stores the step's keys and values in the wrapped cache and keeps
// what it returns for the readers.
func (o *Owner) Update(g *mlx.Graph, keys, values *mlx.Array) KV {
	o.offset = o.Cache.Offset()
	o.kv = o.Cache.Update(g, keys, values)
	o.stored = true
	return o.kv
}

// Reader is the cache of a layer that attends over its owner's keys and
// values. Its Offset is the owner's before this step (the rope position
// of the step's first query); its Update ignores its arguments and returns
// what the owner's Update returned this step.
type Reader struct{ o *Owner }

// NewReader reads o.
func NewReader(o *Owner) Reader { return Reader{o: o} }

func (r Reader) Offset() int {
	if !r.o.stored {
		return r.o.Cache.Offset()
	}
	return r.o.offset
}

func (r Reader) Update(g *mlx.Graph, _, _ *mlx.Array) KV {
	if !r.o.stored {
		g.Failf("kv: a layer reads the keys and values of a layer that has not stored this step's")
		z := g.Zeros([]int{1, 1, 1, 1}, mlx.Float32)
		return KV{Keys: z, Values: z}
	}
	return r.o.kv
}

// Mask is the owner's: the reader attends over its positions.
func (r Reader) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	return r.o.Mask(g, n, window, forceArray)
}

// Trim drops nothing: the owner's cache holds the positions.
func (Reader) Trim(int) int { return 0 }

func (Reader) Trimmable() bool { return false }

func (Reader) Nbytes() int { return 0 }

func (Reader) Free() {}
