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
// Each row has a slot: the arrays [C, Hkv, N, *] hold the B rows in their
// first B of C slots, with room for N positions. A growing batch (every
// position, as Plain) holds row r's entries from position 0 on, in
// temporal order, as the row's own cache holds them: held[r] of them, the
// rest of its slot unused (masked). A window batch (as Rotating, with
// nothing pinned) keeps each row's ring where the row's own Rotating cache
// keeps it: row r's oldest entry at position start[r], the next ones after
// it modulo the window, so that attention reads a row's keys in the order
// the row alone reads them. A step of one position writes each row's next
// position; a longer step has each row keep its newest window-1 entries, in
// temporal order from position 0, and append the step's, as the row's own
// prefill does. Either kind may hold its keys and values quantized, as its
// rows did.
//
// Sequences join by Merge (single-sequence caches after their prompt) and
// Extend, and leave by Filter, between steps. A join writes the joining
// rows into the slots after the batch's and a leave copies only the rows
// the caller's order moves (see Filter), so neither copies the batch; the
// arrays grow (a copy) only when the rows or positions outgrow their room,
// and shrink once less than half of it is used. Extract gives one row back
// as a single-sequence cache.
type Batched struct {
	s      store
	rows   []int // per row: positions processed (its rope offset)
	held   []int // per row: entries it holds
	start  []int // window batches, per row: the position of its oldest entry
	n      int   // growing batches: the most entries a row holds
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

// ---- slots ----

// RowCapacity is the rows c's arrays have room for (0 while it holds
// none).
func (c *Batched) RowCapacity() int {
	if c.s.empty() {
		return 0
	}
	return c.s.arrs[0].Dim(0)
}

// ReserveRows makes room for rows sequences (a copy of what c holds when it
// grows), so that as many can join without one; a cache holding nothing
// yet makes its room on its first step or join.
func (c *Batched) ReserveRows(g *mlx.Graph, rows int) error {
	if c.s.empty() || rows <= c.RowCapacity() {
		return nil
	}
	c.reserve(g, rows, c.s.length(), nil)
	return g.Err()
}

// view is c's arrays as its rows use them: its B rows, and its first cols
// positions.
func (c *Batched) view(g *mlx.Graph, cols int) []*mlx.Array {
	B := len(c.rows)
	if B == c.RowCapacity() && cols == c.s.length() {
		return c.s.arrs
	}
	out := make([]*mlx.Array, len(c.s.arrs))
	for i, a := range c.s.arrs {
		sh := dims4(a)
		out[i] = g.Slice(a, []int{0, 0, 0, 0}, []int{B, sh[1], cols, sh[3]})
	}
	return out
}

// reserve gives c room for at least rows slots and cols positions, keeping
// what it holds (arrays in the store's form like give the shapes of a
// cache that holds nothing yet). Growing copies the arrays into new ones,
// the new room zeros.
func (c *Batched) reserve(g *mlx.Graph, rows, cols int, like []*mlx.Array) {
	if c.s.empty() {
		out := make([]*mlx.Array, len(like))
		for i, a := range like {
			sh := dims4(a)
			out[i] = g.Zeros([]int{rows, sh[1], cols, sh[3]}, a.Dtype())
		}
		c.s.set(g, out)
		return
	}
	C, N := c.RowCapacity(), c.s.length()
	if rows <= C && cols <= N {
		return
	}
	rows, cols = max(rows, C), max(cols, N)
	out := make([]*mlx.Array, len(c.s.arrs))
	for i, a := range c.s.arrs {
		out[i] = g.Pad(a, []int{0, 2}, []int{0, 0}, []int{rows - C, cols - N}, 0)
	}
	c.s.set(g, out)
}

// shrink copies c's rows into arrays of their own size when less than half
// of the room is used: rows slots once B is at most half of them (and 4
// fewer), and for a growing batch, positions rounded up to a step once the
// longest row uses at most half of them.
func (c *Batched) shrink(g *mlx.Graph) {
	if c.s.empty() {
		return
	}
	B, C, N := len(c.rows), c.RowCapacity(), c.s.length()
	rows, cols := C, N
	if 2*B <= C && C-B >= 4 {
		rows = B
	}
	if want := roundUp(max(c.n, 1), step); c.window == 0 && 2*want <= N {
		cols = want
	}
	if rows == C && cols == N {
		return
	}
	out := make([]*mlx.Array, len(c.s.arrs))
	for i, a := range c.s.arrs {
		sh := dims4(a)
		out[i] = g.Contiguous(g.Slice(a, []int{0, 0, 0, 0}, []int{rows, sh[1], cols, sh[3]}))
	}
	c.s.set(g, out)
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// used is how many positions of c's slots its rows use: a growing batch's
// longest row, a window batch's whole ring.
func (c *Batched) used() int {
	if c.window == 0 {
		return c.n
	}
	return c.s.length()
}

// rings is a window batch's rows with their rings within the window, and
// each row's held entries and oldest position: c's own when no longer step
// has left more than a window, else each row's newest window entries in
// temporal order from position 0 (one gather, c left as it was).
func (c *Batched) rings(g *mlx.Graph) ([]*mlx.Array, []int, []int) {
	if c.s.length() <= c.window {
		return c.view(g, c.s.length()), c.held, c.start
	}
	p := c.plan()
	return gather(g, c.view(g, c.s.length()), p.keep, len(c.rows), c.window), p.held, p.start
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
	if len(caches) == 1 {
		// a view of the cache's arrays, copied where it joins a batch
		b, err := single(g, caches[0])
		if err != nil {
			return nil, fmt.Errorf("kv: cache 0: %w", err)
		}
		return b, nil
	}
	singles := make([]*Batched, 0, len(caches))
	defer func() {
		for _, b := range singles {
			b.Free()
		}
	}()
	for i, c := range caches {
		b, err := single(g, c)
		if err != nil {
			return nil, fmt.Errorf("kv: cache %d: %w", i, err)
		}
		singles = append(singles, b)
	}
	out := &Batched{window: singles[0].window, quant: singles[0].quant}
	if i, err := out.extend(g, singles); err != nil {
		out.Free()
		if i >= 0 {
			return nil, fmt.Errorf("kv: cache %d: %w", i, err)
		}
		return nil, fmt.Errorf("kv: %w", err)
	}
	return out, nil
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
		b.s.bits, b.s.group, b.s.dtype = c.s.bits, c.s.group, c.s.dtype
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
		b.s.bits, b.s.group, b.s.dtype = c.s.bits, c.s.group, c.s.dtype
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
				held = c.offset // growing: positions [0, offset)
				arrs = slicePos(g, arrs, 0, held)
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

// Extend appends the rows of other after c's, in the slots after them.
// Both must be of one kind and window; when one is quantized the other is
// quantized to match. other is left as it was.
func (c *Batched) Extend(g *mlx.Graph, with Rows) error {
	other, ok := with.(*Batched)
	if !ok {
		return fmt.Errorf("kv: extending a batch of keys and values with a %T", with)
	}
	if _, err := c.extend(g, []*Batched{other}); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// extend appends the rows of others, in order, after c's: one write of
// every joining row into its slot (a chain of writes to one array would
// copy the array at each link, since the link before still holds it). An
// error about one of others comes with its index, else with -1.
func (c *Batched) extend(g *mlx.Graph, others []*Batched) (int, error) {
	srcs := make([][]*mlx.Array, len(others))
	held, start := slices.Clone(c.held), slices.Clone(c.start)
	for i, other := range others {
		if c.window != other.window {
			return i, fmt.Errorf("batching a cache of window %d (0: growing) with one of window %d", c.window, other.window)
		}
		if c.s.broken != nil || other.s.broken != nil {
			return i, fmt.Errorf("batching a cache that is unusable after a failed step")
		}
		if !c.quant.same(other.quant) {
			return i, fmt.Errorf("batching caches quantized differently (%s and %s)", c.quant, other.quant)
		}
		h, st := other.held, other.start
		if !other.s.empty() && other.used() > 0 {
			if other.window > 0 {
				srcs[i], h, st = other.rings(g)
			} else {
				srcs[i] = other.view(g, other.n)
			}
		}
		held, start = append(held, h...), append(start, st...)
	}
	if c.window > 0 && c.s.length() > c.window {
		arrs, h, st := c.rings(g)
		c.s.set(g, arrs)
		copy(held, h)
		copy(start, st)
	}
	// The batch keeps its form, or, while it holds nothing, takes the first
	// joining rows'; a quantized joiner makes a dense batch quantized. The
	// dtype it holds is its rows' from the first joiner on, whether or not
	// that row holds anything yet.
	formed := !c.s.empty()
	if !formed && len(others) > 0 {
		c.s.dtype = others[0].s.dtype
	}
	for i, arrs := range srcs {
		if arrs == nil {
			continue
		}
		o := &others[i].s
		switch {
		case !formed:
			c.s.bits, c.s.group = o.bits, o.group
			c.s.heads, c.s.kdim, c.s.vdim = o.heads, o.kdim, o.vdim
			formed = true
		case c.s.bits == 0 && o.bits != 0:
			if !c.s.empty() {
				c.s.set(g, encodeAll(g, c.s.arrs, o.bits, o.group, c.s.dtype))
			}
			c.s.bits, c.s.group = o.bits, o.group
		}
	}
	var like []*mlx.Array
	var updates [][]*mlx.Array
	var slots, at []int
	cols, B := 0, len(c.rows)
	for i, arrs := range srcs {
		k := len(others[i].rows)
		if arrs != nil {
			if others[i].s.bits != c.s.bits {
				arrs = encodeAll(g, arrs, c.s.bits, c.s.group, c.s.dtype)
			} else if dt := c.s.dtype; c.s.bits == 0 && dt != 0 && arrs[0].Dtype() != dt {
				// a row held in another dtype joins in the batch's
				arrs = []*mlx.Array{g.AsType(arrs[0], dt), g.AsType(arrs[1], dt)}
			}
			want := c.s.arrs
			if want == nil {
				want = like
			}
			if want != nil {
				if ca, cb := dims4(want[0]), dims4(arrs[0]); ca[1] != cb[1] || ca[3] != cb[3] ||
					dims4(want[len(want)-1])[3] != dims4(arrs[len(arrs)-1])[3] {
					return i, fmt.Errorf("batching caches of shapes %v and %v", ca, cb)
				}
			}
			if like == nil {
				like = arrs
			}
			cols = max(cols, dims4(arrs[0])[2])
			updates = append(updates, arrs)
			for r := range k {
				slots, at = append(slots, B+r), append(at, 0)
			}
		}
		B += k
	}
	if updates != nil {
		if c.window == 0 {
			cols = roundUp(cols, step)
		}
		if !c.s.empty() {
			cols = max(cols, c.s.length())
		}
		c.reserve(g, B, cols, like)
		c.s.set(g, g.CacheRows(c.s.arrs, updates, slots, at, nil))
	} else if !c.s.empty() {
		c.reserve(g, B, c.s.length(), nil)
	}
	if err := g.Err(); err != nil {
		return -1, err
	}
	for _, other := range others {
		c.rows = append(c.rows, other.rows...)
		if c.window == 0 {
			c.n = max(c.n, other.n)
		}
	}
	c.held, c.start = held, start
	c.s.batch = len(c.rows)
	return -1, nil
}

// ring is the number of positions a window batch's entries wrap around:
// the window, or the whole buffer while a longer step has left more.
func (c *Batched) ring() int { return max(c.window, c.s.length()) }

// temporal is a window batch's rows in temporal order, right-aligned over
// as many positions as the fullest row holds (left padding before the
// others): one gather of each row's entries.
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
	return gather(g, c.view(g, c.s.length()), idx, B, T)
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

// encodeAll quantizes dense arrays {keys, values}, from dtype when set.
func encodeAll(g *mlx.Graph, arrs []*mlx.Array, bits, group int, dtype mlx.Dtype) []*mlx.Array {
	s := store{bits: bits, group: group, dtype: dtype}
	return s.encode(g, arrs[0], arrs[1])
}

// ---- leaving ----

// Filter keeps the rows keep (indices into the current rows, in the order
// given): row i of the batch is then the row keep[i] was. A row that stays
// in its slot (keep[i] == i) is not copied, and the rows that move are
// copied slot to slot, so an order that moves only the last rows into the
// slots of those that leave costs a row's copy each; an order whose moves
// would overwrite a row still to move gathers every row. Less than half of
// the room used, the arrays shrink.
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
	if len(keep) == 0 || c.s.empty() {
		c.Free()
		c.rows, c.held, c.start, c.s.batch = rows, held, start, len(rows)
		return nil
	}
	var moves []mlx.RowMove
	written := map[int]bool{}
	inPlace := true
	for i, r := range keep {
		if r == i {
			continue
		}
		if written[r] {
			inPlace = false
			break
		}
		cols := c.s.length()
		if c.window == 0 {
			cols = c.held[r]
		}
		moves = append(moves, mlx.RowMove{Dst: i, Src: r, Cols: cols})
		written[i] = true
	}
	switch {
	case !inPlace:
		idx := make([]int32, len(keep))
		for i, r := range keep {
			idx[i] = int32(r)
		}
		at := mlx.FromSlice(g, idx, len(idx))
		arrs := c.view(g, c.s.length())
		out := make([]*mlx.Array, len(arrs))
		for i, a := range arrs {
			out[i] = g.Take(a, at, 0)
		}
		c.s.set(g, out)
	case len(moves) > 0:
		c.s.set(g, g.CacheRows(c.s.arrs, nil, nil, nil, moves))
	}
	if err := g.Err(); err != nil {
		return err
	}
	c.rows, c.held, c.start = rows, held, start
	c.s.batch = len(rows)
	if c.window == 0 {
		c.n = slices.Max(held)
	}
	c.shrink(g)
	return g.Err()
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
	idx := h // a Rotating's next write position
	if h > 0 && !c.s.empty() {
		switch size := c.s.length(); {
		case c.window == 0:
			src = slicePos(g, c.s.arrs, 0, h)
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
	s.bits, s.group, s.dtype = c.s.bits, c.s.group, c.s.dtype
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

// appendCols is a growing batch's step: each row writes its n positions
// after the entries it holds, the arrays growing by whole steps of 256
// positions when the longest row needs more room.
func (c *Batched) appendCols(g *mlx.Graph, upd []*mlx.Array, n int) KV {
	B := len(c.rows)
	c.reserve(g, B, roundUp(c.n+n, step), upd)
	slots := make([]int, B)
	for r := range slots {
		slots[r] = r
	}
	c.s.set(g, g.CacheRows(c.s.arrs, [][]*mlx.Array{upd}, slots, c.held, nil))
	for r := range c.held {
		c.held[r] += n
	}
	c.n += n
	return c.s.kv(c.view(g, c.n))
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
// position (its oldest once its window is full), as the row's own ring
// would.
func (c *Batched) write(g *mlx.Graph, upd []*mlx.Array) KV {
	p := c.plan()
	B := len(c.rows)
	if p.keep != nil {
		c.s.set(g, gather(g, c.view(g, c.s.length()), p.keep, B, c.window))
	}
	c.reserve(g, B, p.size, upd)
	slots := make([]int, B)
	for r := range slots {
		slots[r] = r
	}
	c.s.set(g, g.CacheRows(c.s.arrs, [][]*mlx.Array{upd}, slots, p.write, nil))
	for r := range c.rows {
		if p.held[r] == c.window {
			c.start[r] = (p.start[r] + 1) % c.window
		} else {
			c.start[r] = p.start[r]
		}
		c.held[r] = min(p.held[r]+1, c.window)
	}
	return c.s.kv(c.view(g, p.size))
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
		src = concatPos(g, c.view(g, L), upd)
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
	// Growing: row r's entries from position 0, its n new ones right after
	// them, the S positions attention reads those of the longest row.
	// Window: row r's kept entries from position 0, its new ones right
	// after (see concat).
	S := c.n + n
	at := make([]int, B) // the position of row r's first query
	if c.window == 0 {
		copy(at, c.held)
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
			for t := 0; t <= q; t++ {
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
		out := store{bits: s.bits, group: s.group, dtype: s.dtype, batch: s.batch, heads: s.heads, kdim: s.kdim, vdim: s.vdim}
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
