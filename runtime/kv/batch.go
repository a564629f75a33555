package kv

import (
	"fmt"
	"slices"
	"sync"

	"github.com/archgen/archgen/runtime/mlx"
)

// Batched is one layer's cache for a batch of sequences of different
// lengths, the counterpart of mlx-lm's BatchKVCache and
// BatchRotatingKVCache. Row r of its arrays [B, Hkv, N, *] holds sequence
// r's entries right-aligned in temporal order: the newest held[r] columns
// are the row's, the columns before them are left padding that its masks
// hide. Every row steps together (one column per position of a step), but
// each keeps its own offset, the rope position of its next token, which a
// step's graph carries to the ropes (RowOffsets).
//
// A Batched cache is either growing (every position, as Plain) or a window
// of window positions (as Rotating with nothing pinned): a step of one
// position then writes into a ring, a longer step reorders, keeps the
// newest window-1 columns and appends. Either one may hold its keys and
// values quantized, as its rows did.
//
// Sequences join by Merge (single-sequence caches after their prompt) and
// Extend, and leave by Filter, between steps; Extract gives one row back as
// a single-sequence cache.
type Batched struct {
	s       store
	rows    []int // per row: positions processed (its rope offset)
	held    []int // per row: the newest columns that hold its entries
	n       int   // columns in temporal order (the whole ring once wrapped)
	window  int   // 0: growing; else the ring's size
	wrapped bool  // a full ring: the oldest column is at idx
	idx     int   // the next write slot of a wrapped ring
	quant   Quantization
	bound   *mlx.Graph // the last graph bound to this cache's rows
}

// Rows is the number of sequences in the batch.
func (c *Batched) Rows() int { return len(c.rows) }

// RowOffset is row r's offset: the positions it has processed.
func (c *Batched) RowOffset(r int) int { return c.rows[r] }

// Window is the ring size of a window cache, 0 for a growing one.
func (c *Batched) Window() int { return c.window }

// Quantized reports whether c holds its keys and values quantized now.
func (c *Batched) Quantized() bool { return c.s.quantized() }

// Offset is the largest row offset. A forward pass must not rope from it:
// each row's positions reach the ropes through RowOffsets.
func (c *Batched) Offset() int {
	m := 0
	for _, o := range c.rows {
		m = max(m, o)
	}
	return m
}

// Trimmable is false: a batch is not rewound.
func (c *Batched) Trimmable() bool { return false }

func (c *Batched) Trim(int) int { return 0 }

func (c *Batched) Nbytes() int { return c.s.nbytes() }

// State is the arrays c holds (nil while empty), to evaluate after a join
// or a filter. They are valid until the next change of c.
func (c *Batched) State() []*mlx.Array { return c.s.arrs }

func (c *Batched) Free() {
	c.s.free()
	c.rows, c.held = nil, nil
	c.n, c.idx, c.wrapped = 0, 0, false
	c.s.bits, c.s.group = 0, 0
	c.unbind()
}

// ---- per-row positions on a step's graph ----

var bindings sync.Map // *mlx.Graph -> []int

// RowOffsets is the offset of each row of the batch a graph steps, bound by
// the batched caches' Mask (which every forward pass asks before its
// layers); nil on a graph that steps no batch. A rope applies row r of its
// input from position RowOffsets(g)[r], not from the cache's Offset.
func RowOffsets(g *mlx.Graph) []int {
	if v, ok := bindings.Load(g); ok {
		return v.([]int)
	}
	return nil
}

// bind records c's row offsets as g's; a graph already bound to other
// offsets fails (two batches in one graph).
func (c *Batched) bind(g *mlx.Graph) {
	rows := slices.Clone(c.rows)
	if prev, loaded := bindings.LoadOrStore(g, rows); loaded {
		if !slices.Equal(prev.([]int), rows) {
			g.Failf("kv: one graph steps two batches with different row offsets (%v and %v)", prev, rows)
		}
		return
	}
	if c.bound != nil && c.bound != g {
		bindings.Delete(c.bound)
	}
	c.bound = g
}

func (c *Batched) unbind() {
	if c.bound != nil {
		bindings.Delete(c.bound)
		c.bound = nil
	}
}

// ---- joining ----

// Merge makes a batch of the given caches of one layer, one sequence each
// (B = 1), in that order: Plain caches make a growing batch, Rotating ones
// that pin nothing a window batch of their size. They must agree on kind,
// window and quantization; a quantized row makes the batch quantized. The
// caches are left as they were.
func Merge(g *mlx.Graph, caches []Cache) (*Batched, error) {
	if len(caches) == 0 {
		return nil, fmt.Errorf("kv: merging no caches")
	}
	var out *Batched
	for i, c := range caches {
		b, err := single(g, c)
		if err != nil {
			if out != nil {
				out.Free()
			}
			return nil, fmt.Errorf("kv: cache %d: %w", i, err)
		}
		if out == nil {
			out = b
			continue
		}
		err = out.extend(g, b)
		b.Free()
		if err != nil {
			out.Free()
			return nil, fmt.Errorf("kv: cache %d: %w", i, err)
		}
	}
	return out, g.Err()
}

// single is a batch of one row holding what c holds, in temporal order.
func single(g *mlx.Graph, c Cache) (*Batched, error) {
	var b *Batched
	switch c := c.(type) {
	case *Plain:
		if c.s.broken != nil {
			return nil, fmt.Errorf("the cache is unusable after a failed step: %v", c.s.broken)
		}
		b = &Batched{quant: c.quant}
		b.s.bits, b.s.group = c.s.bits, c.s.group
		if !c.s.empty() && c.offset > 0 {
			b.s.set(g, fresh(g, slicePos(g, c.s.arrs, 0, c.offset)))
		}
		b.setRows(c.s, c.offset, c.offset)
	case *Rotating:
		if c.bad != nil {
			return nil, c.bad
		}
		if c.s.broken != nil {
			return nil, fmt.Errorf("the cache is unusable after a failed step: %v", c.s.broken)
		}
		if c.keep != 0 {
			return nil, fmt.Errorf("a rotating cache that pins its first %d positions cannot be batched", c.keep)
		}
		b = &Batched{window: c.maxSize, quant: c.quant}
		b.s.bits, b.s.group = c.s.bits, c.s.group
		held := 0
		if !c.s.empty() && c.offset > 0 {
			arrs := c.temporalOrder(g)
			if arrs == nil {
				arrs = c.s.arrs
			}
			held = dims4(arrs[0])[2]
			b.s.set(g, fresh(g, arrs))
		}
		b.setRows(c.s, c.offset, held)
	default:
		return nil, fmt.Errorf("a %T cannot be batched (Plain and Rotating caches can)", c)
	}
	if err := g.Err(); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// setRows sets the rows of a batch made from one cache whose store is s
// (B rows alike, each with offset positions of which the newest held are
// kept).
func (b *Batched) setRows(s store, offset, held int) {
	B := max(s.batch, 1)
	b.rows = slices.Repeat([]int{offset}, B)
	b.held = slices.Repeat([]int{held}, B)
	b.s.batch, b.s.heads, b.s.kdim, b.s.vdim = B, s.heads, s.kdim, s.vdim
	b.n = held
}

// Extend appends the rows of other after c's. Both must be of one kind and
// window; when one is quantized the other is quantized to match. other is
// left as it was.
func (c *Batched) Extend(g *mlx.Graph, other *Batched) error {
	if err := c.extend(g, other); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

func (c *Batched) extend(g *mlx.Graph, other *Batched) error {
	if c.window != other.window {
		return fmt.Errorf("batching a cache of window %d (0: growing) with one of window %d", c.window, other.window)
	}
	if c.s.broken != nil || other.s.broken != nil {
		return fmt.Errorf("batching a cache that is unusable after a failed step")
	}
	if c.quant != other.quant {
		return fmt.Errorf("batching caches quantized differently (%d and %d bits, group sizes %d and %d, from offsets %d and %d)",
			c.quant.Bits, other.quant.Bits, c.quant.GroupSize, other.quant.GroupSize, c.quant.Start, other.quant.Start)
	}
	a, b := c.temporal(g), other.temporal(g)
	bits, group := c.s.bits, c.s.group
	switch {
	case a != nil && b != nil && c.s.bits != other.s.bits:
		if c.s.bits == 0 {
			a, bits, group = c.encodeAll(g, a, other.s.bits, other.s.group), other.s.bits, other.s.group
		} else {
			b = other.encodeAll(g, b, c.s.bits, c.s.group)
		}
	case a == nil && b != nil:
		bits, group = other.s.bits, other.s.group
	}
	if a != nil && b != nil {
		if ca, cb := dims4(a[0]), dims4(b[0]); ca[1] != cb[1] || dims4(a[len(a)-1])[3] != dims4(b[len(b)-1])[3] || ca[3] != cb[3] {
			return fmt.Errorf("batching caches of shapes %v and %v", ca, cb)
		}
	}
	n := max(c.n, other.n)
	var arrs []*mlx.Array
	switch {
	case a != nil && b != nil:
		arrs = make([]*mlx.Array, len(a))
		for i := range a {
			arrs[i] = g.Concatenate(0, padLeft(g, a[i], n), padLeft(g, b[i], n))
		}
	case a != nil:
		arrs = make([]*mlx.Array, len(a))
		for i := range a {
			arrs[i] = g.Concatenate(0, padLeft(g, a[i], n), g.Zeros(withDims(a[i], len(other.rows), n), a[i].Dtype()))
		}
	case b != nil:
		arrs = make([]*mlx.Array, len(b))
		for i := range b {
			arrs[i] = g.Concatenate(0, g.Zeros(withDims(b[i], len(c.rows), n), b[i].Dtype()), padLeft(g, b[i], n))
		}
	}
	if err := g.Err(); err != nil {
		return err
	}
	if arrs != nil {
		heads, kdim, vdim := c.s.heads, c.s.kdim, c.s.vdim
		if c.s.empty() {
			heads, kdim, vdim = other.s.heads, other.s.kdim, other.s.vdim
		}
		c.s.set(g, arrs)
		c.s.heads, c.s.kdim, c.s.vdim = heads, kdim, vdim
	}
	c.s.bits, c.s.group = bits, group
	c.rows = append(c.rows, other.rows...)
	c.held = append(c.held, other.held...)
	c.s.batch = len(c.rows)
	c.n, c.wrapped, c.idx = n, false, 0
	return nil
}

// temporal is c's columns in temporal order, cut to the n in use (nil when
// c holds nothing).
func (c *Batched) temporal(g *mlx.Graph) []*mlx.Array {
	switch {
	case c.s.empty() || c.n == 0:
		return nil
	case c.wrapped && c.idx > 0:
		return concatPos(g, slicePos(g, c.s.arrs, c.idx, c.n), slicePos(g, c.s.arrs, 0, c.idx))
	case c.s.length() > c.n:
		return slicePos(g, c.s.arrs, 0, c.n)
	}
	return c.s.arrs
}

// encodeAll quantizes dense arrays {keys, values}.
func (c *Batched) encodeAll(g *mlx.Graph, arrs []*mlx.Array, bits, group int) []*mlx.Array {
	s := store{bits: bits, group: group}
	return s.encode(g, arrs[0], arrs[1])
}

func withDims(a *mlx.Array, b, n int) []int {
	sh := dims4(a)
	return []int{b, sh[1], n, sh[3]}
}

// padLeft gives a [B, H, m, *] array n columns, zeros first.
func padLeft(g *mlx.Graph, a *mlx.Array, n int) *mlx.Array {
	m := dims4(a)[2]
	if m >= n {
		return a
	}
	return g.Pad(a, []int{2}, []int{n - m}, []int{0}, 0)
}

// ---- leaving ----

// Filter keeps the rows keep (indices into the current rows, in the order
// given) and drops the columns no remaining row holds.
func (c *Batched) Filter(g *mlx.Graph, keep []int) error {
	for _, r := range keep {
		if r < 0 || r >= len(c.rows) {
			return fmt.Errorf("kv: row %d of a batch of %d", r, len(c.rows))
		}
	}
	rows, held := make([]int, len(keep)), make([]int, len(keep))
	for i, r := range keep {
		rows[i], held[i] = c.rows[r], c.held[r]
	}
	if len(keep) == 0 {
		c.Free()
		c.rows, c.held = []int{}, []int{}
		return nil
	}
	if !c.s.empty() {
		idx := make([]int32, len(keep))
		for i, r := range keep {
			idx[i] = int32(r)
		}
		at := mlx.FromSlice(g, idx, len(idx))
		arrs := c.temporal(g)
		if arrs == nil {
			c.Free()
			c.rows, c.held, c.s.batch = rows, held, len(rows)
			return nil
		}
		most := slices.Max(held)
		n := c.n
		if most < n {
			arrs = slicePos(g, arrs, n-most, n)
			n = most
		}
		out := make([]*mlx.Array, len(arrs))
		for i, a := range arrs {
			out[i] = g.Take(a, at, 0)
		}
		if err := g.Err(); err != nil {
			return err
		}
		c.s.set(g, out)
		c.n, c.wrapped, c.idx = n, false, 0
	}
	c.rows, c.held = rows, held
	c.s.batch = len(rows)
	return nil
}

// Extract is row r as a cache of one sequence: a Plain cache, or a
// Rotating one of the window, holding the row's entries in temporal order,
// with c's quantization.
func (c *Batched) Extract(g *mlx.Graph, r int) (Cache, error) {
	if r < 0 || r >= len(c.rows) {
		return nil, fmt.Errorf("kv: row %d of a batch of %d", r, len(c.rows))
	}
	var arrs []*mlx.Array
	if h := c.held[r]; h > 0 && !c.s.empty() {
		at := mlx.FromSlice(g, []int32{int32(r)}, 1)
		for _, a := range slicePos(g, c.temporal(g), c.n-h, c.n) {
			arrs = append(arrs, g.Contiguous(g.Take(a, at, 0)))
		}
	}
	if err := g.Err(); err != nil {
		return nil, err
	}
	var s store
	s.bits, s.group = c.s.bits, c.s.group
	if arrs != nil {
		s.set(g, arrs)
		s.batch, s.heads, s.kdim, s.vdim = 1, c.s.heads, c.s.kdim, c.s.vdim
	}
	if c.window == 0 {
		return &Plain{s: s, offset: c.rows[r], quant: c.quant}, nil
	}
	return &Rotating{s: s, offset: c.rows[r], idx: c.held[r], maxSize: c.window, quant: c.quant}, nil
}

// ---- a step ----

func (c *Batched) Update(g *mlx.Graph, k, v *mlx.Array) KV {
	if g.Err() != nil {
		return KV{Keys: k, Values: v}
	}
	if k.Ndim() == 4 && k.Dim(0) != len(c.rows) {
		g.Failf("kv: a step of %d rows on a batch of %d", k.Dim(0), len(c.rows))
		return KV{Keys: k, Values: v}
	}
	if !slices.Equal(RowOffsets(g), c.rows) {
		g.Failf("kv: a batched cache stepped on a graph that does not carry its rows' offsets %v (a batch's Mask binds them)", c.rows)
		return KV{Keys: k, Values: v}
	}
	if !c.quant.switchAt(g, &c.s, c.Offset()) {
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
		return KV{Keys: k, Values: v}
	}
	defer c.s.settle(g)
	for r := range c.rows {
		c.rows[r] += n
	}
	switch {
	case c.window == 0:
		return c.appendCols(g, upd, n)
	case n == 1:
		return c.ring(g, upd)
	}
	return c.concat(g, upd, n)
}

// appendCols is a growing batch's step: write after the n columns in use,
// growing the buffers by whole steps of 256.
func (c *Batched) appendCols(g *mlx.Graph, upd []*mlx.Array, n int) KV {
	prev := c.n
	if c.s.empty() || prev+n > c.s.length() {
		grown := zerosPos(g, upd, (n+step-1)/step*step)
		if !c.s.empty() {
			old := c.s.arrs
			if prev < c.s.length() {
				old = slicePos(g, old, 0, prev)
			}
			grown = concatPos(g, old, grown)
		}
		c.s.set(g, grown)
	}
	c.s.set(g, writePos(g, c.s.arrs, upd, prev))
	c.n += n
	for r := range c.held {
		c.held[r] += n
	}
	if c.n < c.s.length() {
		return c.s.kv(slicePos(g, c.s.arrs, 0, c.n))
	}
	return c.s.kv(c.s.arrs)
}

// ring is a window batch's step of one position.
func (c *Batched) ring(g *mlx.Graph, upd []*mlx.Array) KV {
	if !c.wrapped && c.n >= c.window {
		// After a longer step: keep the newest window-1 columns.
		c.s.set(g, slicePos(g, c.temporal(g), c.n-c.window+1, c.n))
		c.n = c.window - 1
	}
	if c.wrapped {
		c.s.set(g, writePos(g, c.s.arrs, upd, c.idx))
		c.idx = (c.idx + 1) % c.window
	} else {
		if c.s.empty() || c.n == c.s.length() {
			grown := zerosPos(g, upd, min(step, c.window-c.n))
			if !c.s.empty() {
				grown = concatPos(g, c.s.arrs, grown)
			}
			c.s.set(g, grown)
		}
		c.s.set(g, writePos(g, c.s.arrs, upd, c.n))
		c.n++
		if c.n == c.window {
			c.wrapped, c.idx = true, 0
		}
	}
	for r := range c.held {
		c.held[r] = min(c.held[r]+1, c.n)
	}
	if c.n < c.s.length() {
		return c.s.kv(slicePos(g, c.s.arrs, 0, c.n))
	}
	return c.s.kv(c.s.arrs)
}

// concat is a window batch's step of n > 1 positions: temporal order, the
// newest window-1 columns kept, the step appended, so that each new
// position sees a window of context.
func (c *Batched) concat(g *mlx.Graph, upd []*mlx.Array, n int) KV {
	if c.s.empty() {
		c.s.set(g, fresh(g, upd))
	} else {
		old := c.temporal(g)
		if keep := c.window - 1; c.n > keep {
			old = slicePos(g, old, c.n-keep, c.n)
			c.n = keep
		}
		c.s.set(g, concatPos(g, old, upd))
	}
	for r := range c.held {
		c.held[r] = min(c.held[r], c.n) + n
	}
	c.n += n
	c.wrapped, c.idx = false, 0
	return c.s.kv(c.s.arrs)
}

// Mask is the boolean mask [B, 1, n, S] of the next n queries of every row
// against the S columns the step's Update will return: each query sees its
// own row's entries only, causally, and with window > 0 only the window
// newest positions up to its own (for n > 1 on a window batch the window is
// the ring's size by default, as Rotating's). It also binds the rows'
// offsets to g for the ropes (RowOffsets). forceArray is moot: the mask is
// always an array.
func (c *Batched) Mask(g *mlx.Graph, n, window int, forceArray bool) mlx.AttentionMask {
	if g.Err() != nil {
		return mlx.NoMask
	}
	if n <= 0 {
		g.Failf("kv: a mask for %d queries", n)
		return mlx.NoMask
	}
	c.bind(g)
	B := len(c.rows)
	// Per layout: S columns after the step, first the old columns kept
	// (k of them, of which row r holds the newest old[r]), the query of
	// position i at temporal column k+i, and slot(t) the column of temporal
	// index t.
	var S, k int
	old := slices.Clone(c.held)
	slot := func(t int) int { return t }
	switch {
	case c.window == 0:
		k, S = c.n, c.n+n
	case n == 1:
		if c.wrapped {
			k, S = c.window-1, c.window
			start := (c.idx + 1) % c.window
			slot = func(t int) int { return (start + t) % c.window }
		} else {
			k = min(c.n, c.window-1)
			S = k + 1
		}
	default:
		if window <= 0 {
			window = c.window
		}
		k = min(c.n, c.window-1)
		S = k + n
	}
	for r := range old {
		old[r] = min(old[r], k)
	}
	m := make([]bool, B*n*S)
	for r := range B {
		for i := range n {
			q := k + i
			row := m[(r*n+i)*S : (r*n+i+1)*S]
			for t := k - old[r]; t <= q; t++ {
				if window > 0 && t <= q-window {
					continue
				}
				row[slot(t)] = true
			}
		}
	}
	return mlx.MaskArray(mlx.FromSlice(g, m, B, 1, n, S))
}

// Clone is a copy of a Plain or Rotating cache that owns its own arrays:
// stepping either one leaves the other as it was. A Plain copy holds only
// the positions in use.
func Clone(g *mlx.Graph, c Cache) (Cache, error) {
	copyStore := func(s store, arrs []*mlx.Array) (store, error) {
		out := store{bits: s.bits, group: s.group, batch: s.batch, heads: s.heads, kdim: s.kdim, vdim: s.vdim}
		if s.broken != nil {
			return out, fmt.Errorf("kv: cloning a cache that is unusable after a failed step: %v", s.broken)
		}
		if arrs != nil {
			cp := make([]*mlx.Array, len(arrs))
			for i, a := range arrs {
				cp[i] = g.Contiguous(a)
			}
			if err := g.Err(); err != nil {
				return out, err
			}
			out.set(g, fresh(g, cp))
		}
		return out, nil
	}
	switch c := c.(type) {
	case *Plain:
		var arrs []*mlx.Array
		if !c.s.empty() && c.offset > 0 {
			arrs = slicePos(g, c.s.arrs, 0, c.offset)
		}
		s, err := copyStore(c.s, arrs)
		if err != nil {
			return nil, err
		}
		return &Plain{s: s, offset: c.offset, quant: c.quant}, nil
	case *Rotating:
		if c.bad != nil {
			return nil, c.bad
		}
		s, err := copyStore(c.s, c.s.arrs)
		if err != nil {
			return nil, err
		}
		return &Rotating{s: s, offset: c.offset, idx: c.idx, maxSize: c.maxSize, keep: c.keep, quant: c.quant}, nil
	}
	return nil, fmt.Errorf("kv: a %T cannot be cloned (Plain and Rotating caches can)", c)
}
