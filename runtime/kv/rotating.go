package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Rotating is a window cache with mlx-lm's RotatingKVCache semantics: it
// holds at most maxSize positions once decoding, the first keep of them
// pinned. A prefill of S > 1 positions puts the held positions in temporal
// order, drops the oldest unpinned ones down to maxSize - 1, and appends all
// S, so that every new position sees maxSize of context (up to
// maxSize + S - 1 entries are held then). A single-position step writes in
// place, into a ring over the slots from keep to maxSize, after trimming
// the buffer to maxSize. Unlike mlx-lm's, a Rotating cache can be
// quantized (see Quantize).
type Rotating struct {
	s             store
	offset        int // positions processed
	idx           int // the next write slot (mlx-lm's _idx)
	maxSize, keep int
	quant         Quantization
	bad           error // the constructor's arguments were wrong
}

// NewRotating makes an empty window cache of maxSize positions that pins
// the first keep (0 <= keep < maxSize).
func NewRotating(maxSize, keep int) *Rotating {
	c := &Rotating{maxSize: maxSize, keep: keep}
	if maxSize <= 0 || keep < 0 || keep >= maxSize {
		c.bad = fmt.Errorf("kv: a rotating cache of max size %d keeping %d: need 0 <= keep < max size", maxSize, keep)
	}
	return c
}

// Quantize sets when and how c quantizes what it holds (see Quantization)
// and returns c. A zero Quantization keeps c dense.
func (c *Rotating) Quantize(q Quantization) *Rotating {
	c.quant = q
	return c
}

// Hold makes c hold keys and values in dt (see Plain.Hold) and returns c.
func (c *Rotating) Hold(dt mlx.Dtype) *Rotating {
	c.s.dtype = dt
	return c
}

// Quantized reports whether c holds its keys and values quantized now.
func (c *Rotating) Quantized() bool { return c.s.quantized() }

// MaxSize is the number of positions c holds when decoding.
func (c *Rotating) MaxSize() int { return c.maxSize }

// Keep is the number of first positions c never drops.
func (c *Rotating) Keep() int { return c.keep }

func (c *Rotating) Offset() int { return c.offset }

func (c *Rotating) Update(g *mlx.Graph, k, v *mlx.Array) KV {
	if c.bad != nil {
		g.Fail(c.bad)
		return KV{Keys: k, Values: v}
	}
	if !c.quant.switchAt(g, &c.s, c.offset) {
		return KV{Keys: k, Values: v}
	}
	n := c.s.check(g, k, v)
	if n < 0 {
		return KV{Keys: k, Values: v}
	}
	if c.s.empty() {
		c.s.remember(k, v)
	}
	upd := c.s.encode(g, k, v)
	if g.Err() != nil {
		return KV{Keys: k, Values: v} // nothing changed yet
	}
	defer c.s.settle(g)
	if n == 1 {
		return c.updateInPlace(g, upd)
	}
	return c.updateConcat(g, upd, n)
}

// updateConcat is the prefill path: temporal order, trim, append.
func (c *Rotating) updateConcat(g *mlx.Graph, upd []*mlx.Array, n int) KV {
	if c.s.empty() {
		c.s.set(g, fresh(g, upd))
	} else {
		if ord := c.temporalOrder(g); ord != nil {
			c.s.set(g, ord)
		}
		c.idx = c.s.length()
		// Keep maxSize - 1 old positions, so that each new one sees
		// maxSize of context.
		c.s.set(g, c.trimmed(g, c.idx-c.maxSize+1, upd))
	}
	c.offset += n
	c.idx = c.s.length()
	return c.s.kv(c.s.arrs)
}

// updateInPlace is the decode path: grow up to maxSize, trim, ring write.
func (c *Rotating) updateInPlace(g *mlx.Graph, upd []*mlx.Array) KV {
	prev := c.offset
	if c.s.empty() || (prev >= c.s.length() && c.s.length() < c.maxSize) {
		size := min(step, c.maxSize-prev)
		if size <= 0 {
			g.Failf("kv: rotating cache state is inconsistent: offset %d, %d slots, max size %d", prev, c.s.length(), c.maxSize)
			return c.s.kv(upd)
		}
		grown := zerosPos(g, upd, size)
		if !c.s.empty() {
			grown = concatPos(g, c.s.arrs, grown)
		}
		c.s.set(g, grown)
		c.idx = prev
	}
	if trim := c.s.length() - c.maxSize; trim > 0 {
		c.s.set(g, c.trimmed(g, trim, nil))
		c.idx = c.maxSize
	}
	if c.idx == c.maxSize {
		c.idx = c.keep
	}
	c.s.set(g, writePos(g, c.s.arrs, upd, c.idx))
	c.offset++
	c.idx++
	if c.offset < c.s.length() {
		return c.s.kv(slicePos(g, c.s.arrs, 0, c.offset))
	}
	return c.s.kv(c.s.arrs)
}

// temporalOrder is the held positions oldest first (the pinned ones
// first of all), cut to what is filled; nil when they are in order already.
func (c *Rotating) temporalOrder(g *mlx.Graph) []*mlx.Array {
	n := c.s.length()
	switch {
	case c.idx == n:
		return nil
	case c.idx < c.offset:
		return concatPos(g,
			slicePos(g, c.s.arrs, 0, c.keep),
			slicePos(g, c.s.arrs, c.idx, n),
			slicePos(g, c.s.arrs, c.keep, c.idx))
	}
	return slicePos(g, c.s.arrs, 0, c.idx)
}

// trimmed drops trim positions after the pinned ones (none when trim <= 0)
// and appends extra when it is not nil.
func (c *Rotating) trimmed(g *mlx.Graph, trim int, extra []*mlx.Array) []*mlx.Array {
	parts := [][]*mlx.Array{c.s.arrs}
	if trim > 0 {
		parts = [][]*mlx.Array{
			slicePos(g, c.s.arrs, 0, c.keep),
			slicePos(g, c.s.arrs, trim+c.keep, c.s.length()),
		}
	}
	if extra != nil {
		parts = append(parts, extra)
	}
	return concatPos(g, parts...)
}

// Mask is mlx-lm's RotatingKVCache.make_mask. For n > 1 queries the window
// defaults to maxSize and the mask takes the offset as at most maxSize - 1
// (what the prefill keeps); the "causal" mode serves while the window
// cannot bind. A single query needs a mask only when its window is shorter
// than maxSize and the cache holds more than the window: then it is the
// ring-ordered mask of the window newest slots.
func (c *Rotating) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	if c.bad != nil {
		g.Fail(c.bad)
		return mlx.NoMask
	}
	if n > 1 {
		if window <= 0 {
			window = c.maxSize
		}
		offset := min(c.maxSize-1, c.offset)
		if offset+n > window || forceArray {
			return mlx.MaskArray(CausalMaskArray(g, n, offset, window))
		}
		return mlx.CausalMask
	}
	if window <= 0 || c.offset < window || c.maxSize <= window {
		return mlx.NoMask
	}
	return mlx.MaskArray(ringMask(g, c.offset, c.idx, c.maxSize, window))
}

// Trimmable reports whether nothing has been dropped yet (offset below
// maxSize), the only state a rotating cache can be trimmed from.
func (c *Rotating) Trimmable() bool { return c.offset < c.maxSize }

func (c *Rotating) Trim(n int) int {
	if !c.Trimmable() {
		return 0
	}
	n = max(min(n, c.offset), 0)
	c.offset -= n
	c.idx -= n
	return n
}

func (c *Rotating) Nbytes() int { return c.s.nbytes() }

// State is the arrays c holds (nil while empty), to evaluate its writes
// when a step's output is not needed. They are valid until the next Update
// or Free.
func (c *Rotating) State() []*mlx.Array { return c.s.arrs }

func (c *Rotating) Free() {
	c.s.free()
	c.offset, c.idx = 0, 0
	c.s.bits, c.s.group = 0, 0
}
