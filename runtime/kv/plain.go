package kv

import (
	"github.com/archgen/archgen/runtime/mlx"
)

// Plain is a growing cache: keys and values live in buffers preallocated in
// steps of 256 positions and written with slice_update, never concatenated
// per token (mlx-lm's KVCache; quantized, its QuantizedKVCache).
type Plain struct {
	s      store
	offset int
	quant  Quantization
}

// NewPlain makes an empty growing cache.
func NewPlain() *Plain { return &Plain{} }

// NewQuantized makes an empty growing cache that holds its keys and values
// quantized from the first step (mlx-lm's QuantizedKVCache).
func NewQuantized(bits, groupSize int) *Plain {
	return NewPlain().Quantize(Quantization{Bits: bits, GroupSize: groupSize})
}

// Quantize sets when and how c quantizes what it holds (see Quantization)
// and returns c. A zero Quantization keeps c dense.
func (c *Plain) Quantize(q Quantization) *Plain {
	c.quant = q
	return c
}

// Hold makes c hold keys and values in dt (float32, bfloat16 or float16;
// quantized, their scales and biases), casting each step's; 0 holds them
// as computed. It returns c.
func (c *Plain) Hold(dt mlx.Dtype) *Plain {
	c.s.dtype = dt
	return c
}

// Quantized reports whether c holds its keys and values quantized now.
func (c *Plain) Quantized() bool { return c.s.quantized() }

func (c *Plain) Offset() int { return c.offset }

func (c *Plain) Update(g *mlx.Graph, k, v *mlx.Array) KV {
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
	prev := c.offset
	if c.s.empty() || prev+n > c.s.length() {
		grown := zerosPos(g, upd, (n+step-1)/step*step)
		if !c.s.empty() {
			old := c.s.arrs
			if prev%step != 0 {
				old = slicePos(g, old, 0, prev)
			}
			grown = concatPos(g, old, grown)
		}
		c.s.set(g, grown)
	}
	c.offset += n
	c.s.set(g, writePos(g, c.s.arrs, upd, prev))
	return c.s.kv(c.filled(g))
}

// filled is the part of the buffers that holds positions.
func (c *Plain) filled(g *mlx.Graph) []*mlx.Array {
	if c.offset < c.s.length() {
		return slicePos(g, c.s.arrs, 0, c.offset)
	}
	return c.s.arrs
}

func (c *Plain) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	return causalMask(g, n, c.offset, window, forceArray)
}

func (c *Plain) Trim(n int) int {
	n = max(min(n, c.offset), 0)
	c.offset -= n
	return n
}

func (c *Plain) Trimmable() bool { return true }

func (c *Plain) Nbytes() int { return c.s.nbytes() }

// State is the arrays c holds (nil while empty), to evaluate its writes
// when a step's output is not needed (a prompt's chunks, say). They are
// valid until the next Update or Free.
func (c *Plain) State() []*mlx.Array { return c.s.arrs }

func (c *Plain) Free() {
	c.s.free()
	c.offset = 0
	c.s.bits, c.s.group = 0, 0
}
