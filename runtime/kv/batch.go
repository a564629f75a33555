package kv

import (
	"fmt"
	"slices"
	"sync"

	"github.com/archgen/archgen/runtime/mlx"
)

// Batched is one layer's cache for a batch of sequences of different
// lengths, the counterpart of mlx-lm's BatchKVCache and
// BatchRotatingKVCache. Every row steps together, one position per row and
// step, but each keeps its own offset, the rope position of its next
// token, which a step's graph carries to the ropes (RowOffsets), and its
// masks hide what is not the row's.
//
// A growing batch (every position, as Plain) holds row r's entries
// right-aligned in temporal order in arrays [B, Hkv, N, *]: its newest
// held[r] columns, after left padding. A window batch (as Rotating, with
// nothing pinned) keeps each row's ring where the row's own Rotating cache
// keeps it: row r's oldest entry at slot start[r], the next ones after it
// modulo the window, so that attention reads a row's keys in the order the
// row alone reads them. A step of one position writes each row's next slot;
// a longer step has each row keep its newest window-1 entries, in temporal
// order from slot 0, and append the step's, as the row's own prefill does.
// Either kind may hold its keys and values quantized, as its rows did.
//
// Sequences join by Merge (single-sequence caches after their prompt) and
// Extend, and leave by Filter, between steps; Extract gives one row back as
// a single-sequence cache.
type Batched struct {
	s      store
	rows   []int // per row: positions processed (its rope offset)
	held   []int // per row: entries it holds
	start  []int // window batches, per row: the slot of its oldest entry
	n      int   // growing batches: columns in use
	window int   // 0: growing; else the ring's size
	quant  Quantization
	bound  *mlx.Graph // the last graph bound to this cache's rows
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
	c.rows, c.held, c.start = nil, nil, nil
	c.n = 0
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

// single is a batch of the rows of c (all alike) holding what c holds, laid
// out as c lays it out.
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
		b.setRows(c.s, c.offset, c.offset, 0)
		b.n = c.offset
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
		held, start := 0, 0
		if n := c.s.length(); n > 0 && c.offset > 0 {
			arrs := c.s.arrs
			switch {
			case n > c.maxSize:
				// After a longer step, in temporal order: its next step
				// keeps the newest maxSize and overwrites the oldest.
				arrs, held = slicePos(g, arrs, n-c.maxSize, n), c.maxSize
			case c.offset >= n:
				held = n
				if n == c.maxSize {
					start = c.idx % c.maxSize
				}
			default:
				held = c.offset // growing: slots [0, offset)
			}
			b.s.set(g, fresh(g, arrs))
		}
		b.setRows(c.s, c.offset, held, start)
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
// (B rows alike).
func (b *Batched) setRows(s store, offset, held, start int) {
	B := max(s.batch, 1)
	b.rows = slices.Repeat([]int{offset}, B)
	b.held = slices.Repeat([]int{held}, B)
	b.start = slices.Repeat([]int{start}, B)
	b.s.batch, b.s.heads, b.s.kdim, b.s.vdim = B, s.heads, s.kdim, s.vdim
}

// Extend appends the rows of other after c's. Both must be of one kind and
// window; when one is quantized the other is quantized to match. other is
// left as it was.
func (c *Batched) Extend(g *mlx.Graph, with Rows) error {
	other, ok := with.(*Batched)
	if !ok {
		return fmt.Errorf("kv: extending a batch of keys and values with a %T", with)
	}
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
	if !c.quant.same(other.quant) {
		return fmt.Errorf("batching caches quantized differently (%s and %s)", c.quant, other.quant)
	}
	a, b := c.layout(g), other.layout(g)
	bits, group := c.s.bits, c.s.group
	switch {
	case a != nil && b != nil && c.s.bits != other.s.bits:
		if c.s.bits == 0 {
			a, bits, group = encodeAll(g, a, other.s.bits, other.s.group), other.s.bits, other.s.group
		} else {
			b = encodeAll(g, b, c.s.bits, c.s.group)
		}
	case a == nil && b != nil:
		bits, group = other.s.bits, other.s.group
	}
	if a != nil && b != nil {
		if ca, cb := dims4(a[0]), dims4(b[0]); ca[1] != cb[1] || dims4(a[len(a)-1])[3] != dims4(b[len(b)-1])[3] || ca[3] != cb[3] {
			return fmt.Errorf("batching caches of shapes %v and %v", ca, cb)
		}
	}
	// Growing batches align their rows at the end (left padding); window
	// batches keep each row's slots (unused slots at the end).
	n := 0
	if a != nil {
		n = dims4(a[0])[2]
	}
	if b != nil {
		n = max(n, dims4(b[0])[2])
	}
	fit := func(x *mlx.Array) *mlx.Array {
		m := dims4(x)[2]
		if m >= n {
			return x
		}
		if c.window > 0 {
			return g.Pad(x, []int{2}, []int{0}, []int{n - m}, 0)
		}
		return g.Pad(x, []int{2}, []int{n - m}, []int{0}, 0)
	}
	var arrs []*mlx.Array
	switch {
	case a != nil && b != nil:
		arrs = make([]*mlx.Array, len(a))
		for i := range a {
			arrs[i] = g.Concatenate(0, fit(a[i]), fit(b[i]))
		}
	case a != nil:
		arrs = make([]*mlx.Array, len(a))
		for i := range a {
			arrs[i] = g.Concatenate(0, fit(a[i]), g.Zeros(withDims(a[i], len(other.rows), n), a[i].Dtype()))
		}
	case b != nil:
		arrs = make([]*mlx.Array, len(b))
		for i := range b {
			arrs[i] = g.Concatenate(0, g.Zeros(withDims(b[i], len(c.rows), n), b[i].Dtype()), fit(b[i]))
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
	c.start = append(c.start, other.start...)
	c.s.batch = len(c.rows)
	if c.window == 0 {
		c.n = n
	}
	return nil
}

// layout is c's arrays as its rows use them: a growing batch's n columns,
// a window batch's whole ring (nil when c holds nothing).
func (c *Batched) layout(g *mlx.Graph) []*mlx.Array {
	switch {
	case c.s.empty():
		return nil
	case c.window == 0 && c.n == 0:
		return nil
	case c.window == 0 && c.s.length() > c.n:
		return slicePos(g, c.s.arrs, 0, c.n)
	}
	return c.s.arrs
}

// ring is the number of slots a window batch's positions wrap around: the
// window, or the whole buffer while a longer step has left more.
func (c *Batched) ring() int { return max(c.window, c.s.length()) }

// temporal is a window batch's rows in temporal order, right-aligned over
// as many columns as the fullest row holds (left padding before the
// others): one gather of each row's slots.
func (c *Batched) temporal(g *mlx.Graph) []*mlx.Array {
	if c.s.empty() {
		return nil
	}
	T := slices.Max(c.held)
	if T == 0 {
		return nil
	}
	B, size := len(c.rows), c.ring()
	idx := make([]int32, B*T)
	for r := range B {
		for j := range T {
			if t := j - (T - c.held[r]); t >= 0 {
				idx[r*T+j] = int32((c.start[r] + t) % size)
			}
		}
	}
	at := mlx.FromSlice(g, idx, B, 1, T, 1)
	out := make([]*mlx.Array, len(c.s.arrs))
	for i, a := range c.s.arrs {
		sh := dims4(a)
		out[i] = g.TakeAlongAxis(a, g.BroadcastTo(at, sh[0], sh[1], T, sh[3]), 2)
	}
	return out
}

// same reports whether q and o quantize alike (any two dense ones do).
func (q Quantization) same(o Quantization) bool {
	return q.Bits == o.Bits && (q.Bits == 0 || (q.group() == o.group() && q.Start == o.Start))
}

// String says how q quantizes, for messages.
func (q Quantization) String() string {
	if q.Bits == 0 {
		return "dense"
	}
	return fmt.Sprintf("%d bits in groups of %d from offset %d", q.Bits, q.group(), q.Start)
}

// encodeAll quantizes dense arrays {keys, values}.
func encodeAll(g *mlx.Graph, arrs []*mlx.Array, bits, group int) []*mlx.Array {
	s := store{bits: bits, group: group}
	return s.encode(g, arrs[0], arrs[1])
}

func withDims(a *mlx.Array, b, n int) []int {
	sh := dims4(a)
	return []int{b, sh[1], n, sh[3]}
}

// ---- leaving ----

// Filter keeps the rows keep (indices into the current rows, in the order
// given); a growing batch drops the columns no remaining row holds.
func (c *Batched) Filter(g *mlx.Graph, keep []int) error {
	for _, r := range keep {
		if r < 0 || r >= len(c.rows) {
			return fmt.Errorf("kv: row %d of a batch of %d", r, len(c.rows))
		}
	}
	pick := func(xs []int) []int {
		out := make([]int, len(keep))
		for i, r := range keep {
			out[i] = xs[r]
		}
		return out
	}
	rows, held, start := pick(c.rows), pick(c.held), pick(c.start)
	arrs := c.layout(g)
	if len(keep) == 0 || arrs == nil {
		c.Free()
		c.rows, c.held, c.start, c.s.batch = rows, held, start, len(rows)
		return nil
	}
	idx := make([]int32, len(keep))
	for i, r := range keep {
		idx[i] = int32(r)
	}
	if most := slices.Max(held); c.window == 0 && most < c.n {
		arrs = slicePos(g, arrs, c.n-most, c.n)
		c.n = most
	}
	at := mlx.FromSlice(g, idx, len(idx))
	out := make([]*mlx.Array, len(arrs))
	for i, a := range arrs {
		out[i] = g.Take(a, at, 0)
	}
	if err := g.Err(); err != nil {
		return err
	}
	c.s.set(g, out)
	c.rows, c.held, c.start = rows, held, start
	c.s.batch = len(rows)
	return nil
}

// Extract is row r as a cache of one sequence, with c's quantization: a
// Plain cache, or a Rotating one of the window laid out as the row's own
// ring (in temporal order when a longer step has left the row
// right-aligned).
func (c *Batched) Extract(g *mlx.Graph, r int) (Cache, error) {
	if r < 0 || r >= len(c.rows) {
		return nil, fmt.Errorf("kv: row %d of a batch of %d", r, len(c.rows))
	}
	h := c.held[r]
	var src []*mlx.Array
	idx := h // a Rotating's next write slot
	if h > 0 && !c.s.empty() {
		switch size := c.s.length(); {
		case c.window == 0:
			src = slicePos(g, c.layout(g), c.n-h, c.n)
		case size <= c.window && h == c.window:
			src, idx = c.s.arrs, c.start[r] // a full ring
		case size <= c.window && c.start[r] == 0:
			src = slicePos(g, c.s.arrs, 0, h) // a growing ring
		default:
			t := c.temporal(g)
			n := dims4(t[0])[2]
			src = slicePos(g, t, n-h, n)
		}
	}
	var arrs []*mlx.Array
	if src != nil {
		at := mlx.FromSlice(g, []int32{int32(r)}, 1)
		for _, a := range src {
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
	return &Rotating{s: s, offset: c.rows[r], idx: idx, maxSize: c.window, quant: c.quant}, nil
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
		return c.write(g, upd)
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

// plan is a window batch's next one-position step, worked out before it is
// taken (Mask and Update both need it): each row's held count and oldest
// slot once a buffer longer than the window is cut back to it (keep, the
// gather that cuts it; nil when it is not longer), the slot each row
// writes, and the buffer's size after the step.
type plan struct {
	keep               []int32 // [B, window]: the column each slot takes
	held, start, write []int
	size               int
}

func (c *Batched) plan() plan {
	B := len(c.rows)
	p := plan{held: slices.Clone(c.held), start: slices.Clone(c.start), write: make([]int, B), size: c.s.length()}
	if p.size > c.window {
		// After a longer step each row is in temporal order from slot 0:
		// it keeps its newest window entries from slot 0, as its own
		// cache trims itself.
		p.size = c.window
		p.keep = make([]int32, B*c.window)
		for r := range B {
			h := min(p.held[r], c.window)
			for j := range h {
				p.keep[r*c.window+j] = int32(p.held[r] - h + j)
			}
			p.held[r], p.start[r] = h, 0
		}
	}
	need := p.size
	for r := range B {
		if p.held[r] == c.window {
			p.write[r] = p.start[r] // overwrite the oldest
		} else {
			p.write[r] = (p.start[r] + p.held[r]) % c.window
		}
		need = max(need, p.write[r]+1)
	}
	if need > p.size {
		p.size = min(c.window, max(need, p.size+step))
	}
	return p
}

// gather takes, from each array [B, H, N, X] of arrs, the columns idx
// ([B, T], row-major) names: [B, H, T, X].
func gather(g *mlx.Graph, arrs []*mlx.Array, idx []int32, B, T int) []*mlx.Array {
	at := mlx.FromSlice(g, idx, B, 1, T, 1)
	out := make([]*mlx.Array, len(arrs))
	for i, a := range arrs {
		sh := dims4(a)
		out[i] = g.TakeAlongAxis(a, g.BroadcastTo(at, sh[0], sh[1], T, sh[3]), 2)
	}
	return out
}

// write is a window batch's step of one position: each row writes its next
// slot (its oldest once its window is full), as the row's own ring would.
func (c *Batched) write(g *mlx.Graph, upd []*mlx.Array) KV {
	p := c.plan()
	if p.keep != nil {
		c.s.set(g, gather(g, c.s.arrs, p.keep, len(c.rows), c.window))
	}
	if c.s.empty() {
		c.s.set(g, zerosPos(g, upd, p.size))
	} else if p.size > c.s.length() {
		c.s.set(g, concatPos(g, c.s.arrs, zerosPos(g, upd, p.size-c.s.length())))
	}
	if w := p.write[0]; allEqual(p.write) {
		c.s.set(g, writePos(g, c.s.arrs, upd, w))
	} else {
		B := len(c.rows)
		idx := make([]int32, B)
		for r, w := range p.write {
			idx[r] = int32(w)
		}
		at := mlx.FromSlice(g, idx, B, 1, 1, 1)
		out := make([]*mlx.Array, len(c.s.arrs))
		for i, a := range c.s.arrs {
			sh := dims4(upd[i])
			out[i] = g.PutAlongAxis(a, g.BroadcastTo(at, sh...), upd[i], 2)
		}
		c.s.set(g, out)
	}
	for r := range c.rows {
		if p.held[r] == c.window {
			c.start[r] = (p.start[r] + 1) % c.window
		} else {
			c.start[r] = p.start[r]
		}
		c.held[r] = min(p.held[r]+1, c.window)
	}
	return c.s.kv(c.s.arrs)
}

func allEqual(xs []int) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return true
}

// kept is, per row, how many of its newest entries a longer step keeps
// (window-1 at most, as Rotating's prefill keeps), and their most.
func (c *Batched) kept() ([]int, int) {
	k := make([]int, len(c.held))
	most := 0
	for r, h := range c.held {
		k[r] = min(h, c.window-1)
		most = max(most, k[r])
	}
	return k, most
}

// concat is a window batch's step of n > 1 positions: each row keeps its
// newest window-1 entries and appends the step's, in temporal order from
// slot 0 (as its own cache's prefill does), so that each new position sees
// a window of context. The buffer may then be longer than the window until
// the next step of one position cuts it back.
func (c *Batched) concat(g *mlx.Graph, upd []*mlx.Array, n int) KV {
	B := len(c.rows)
	k, K := c.kept()
	L := c.s.length()
	src := upd
	if L > 0 {
		src = concatPos(g, c.s.arrs, upd)
	}
	T := K + n
	idx := make([]int32, B*T)
	for r := range B {
		for j := range T {
			switch {
			case j < k[r]:
				idx[r*T+j] = int32((c.start[r] + c.held[r] - k[r] + j) % c.ring())
			case j < k[r]+n:
				idx[r*T+j] = int32(L + j - k[r])
			}
		}
	}
	c.s.set(g, gather(g, src, idx, B, T))
	for r := range c.held {
		c.held[r], c.start[r] = k[r]+n, 0
	}
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
	if c.window > 0 && n == 1 {
		// Each row's held slots after the step, from its oldest.
		p := c.plan()
		m := make([]bool, B*p.size)
		for r := range B {
			h := min(p.held[r]+1, c.window)
			first := p.start[r]
			if p.held[r] == c.window {
				first = (first + 1) % c.window
			}
			for t := range h {
				if window > 0 && t < h-window {
					continue
				}
				m[r*p.size+(first+t)%c.window] = true
			}
		}
		return mlx.MaskArray(mlx.FromSlice(g, m, B, 1, 1, p.size))
	}
	// Growing: the n new columns after the c.n old ones, row r's entries
	// the newest held[r] of those (right-aligned). Window: row r's kept
	// entries from column 0, its new ones right after (see concat).
	S := c.n + n
	first := make([]int, B) // row r's first column
	at := make([]int, B)    // the column of row r's first query
	if c.window == 0 {
		for r := range B {
			first[r], at[r] = c.n-c.held[r], c.n
		}
	} else {
		if window <= 0 {
			window = c.window
		}
		k, K := c.kept()
		S = K + n
		copy(at, k)
	}
	m := make([]bool, B*n*S)
	for r := range B {
		for i := range n {
			q := at[r] + i
			row := m[(r*n+i)*S : (r*n+i+1)*S]
			for t := first[r]; t <= q; t++ {
				if window > 0 && t <= q-window {
					continue
				}
				row[t] = true
			}
		}
	}
	return mlx.MaskArray(mlx.FromSlice(g, m, B, 1, n, S))
}

// Clone is a copy of a cache that owns its own arrays: stepping either one
// leaves the other as it was. A Plain copy holds only the positions in use;
// a States copies its slots.
func Clone(g *mlx.Graph, c Cache) (Cache, error) {
	if cl, ok := c.(cloner); ok {
		return cl.clone(g)
	}
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

func (c *Plain) mergeRows(g *mlx.Graph, caches []Cache) (Rows, error) {
	return merged(Merge(g, caches))
}
func (c *Rotating) mergeRows(g *mlx.Graph, caches []Cache) (Rows, error) {
	return merged(Merge(g, caches))
}

// merged is Merge's batch as Rows (a nil *Batched is a nil Rows).
func merged(b *Batched, err error) (Rows, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}
