package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/archgen/archgen/runtime/mlx"
)

// TestDecodeMemoryFlat decodes 2,000 steps on a small stack, a full layer
// over a plain cache and a sliding one over a ring, and checks that the
// memory MLX holds is the weights and the caches' buffers and nothing
// more: the same after every step, once the buffers are accounted for. A
// step that kept an old buffer, or a graph that outlived its step, would
// show as growth.
func TestDecodeMemoryFlat(t *testing.T) {
	const steps = 2000
	m := newTestStack(t, 2, 99, 0)
	specs := []layerSpec{{0, 0}, {16, 1}}
	caches := []Cache{NewPlain(), NewRotating(16, 0)}
	defer freeAll(caches)
	rng := rand.New(rand.NewPCG(1, 2))
	g := mlx.NewGraph(nil)
	defer g.Close()
	var base int64
	lo, hi := int64(1<<62), int64(-1<<62)
	for s := range steps {
		g.Reset()
		n := 1
		if s == 0 {
			n = 5
		}
		tokens := make([]int32, n)
		for i := range tokens {
			tokens[i] = int32(rng.IntN(vocab))
		}
		if err := g.Eval(m.step(g, tokens, caches, specs)); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		g.Reset()
		held := int64(mlx.ActiveMemory())
		for _, c := range caches {
			held -= int64(c.Nbytes())
		}
		switch {
		case s == 10:
			base = held
		case s > 10:
			lo, hi = min(lo, held-base), max(hi, held-base)
		}
	}
	t.Logf("after %d steps: active memory less the caches' %d bytes moved within [%d, %d] bytes of step 10's",
		steps, caches[0].Nbytes()+caches[1].Nbytes(), lo, hi)
	// The caches' own growth is accounted for; what is left may move by a
	// few small allocations (the step's inputs), not by a buffer per step.
	if hi > 4096 || lo < -4096 {
		t.Fatalf("memory beyond the caches moved by [%d, %d] bytes over %d steps", lo, hi, steps)
	}
	if got := caches[1].Nbytes(); got != 2*16*kvHeads*headDim*4 {
		t.Fatalf("the ring holds %d bytes, want its 16 positions", got)
	}
}

// TestWritesInPlace checks that a decode step writes into the cache's
// buffers rather than copying them: the write copies nothing whole, and
// the step's peak memory stays far below one more copy of the buffers. The step's keys and values are evaluated
// beforehand: when they are computed in the step's own graph, MLX 0.32's
// CPU backend still writes in place (the buffer keeps its address) but
// counts the buffer's size once more into its peak figure, so peak memory
// tells nothing then. That case, and the quantized caches (whose
// quantization always runs in the step's graph), are measured by
// BenchmarkDecodeWrite instead: its time per write does not grow with the
// cache's length.
func TestWritesInPlace(t *testing.T) {
	const heads, dim, filled = 8, 128, 1000
	for _, tc := range []struct {
		name string
		c    Cache
	}{
		{"plain", NewPlain()},
		{"rotating ring", NewRotating(512, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			defer c.Free()
			g := mlx.NewGraph(nil)
			defer g.Close()
			k := g.Ones([]int{1, heads, 1, dim}, mlx.Float32)
			if err := g.Eval(k); err != nil {
				t.Fatal(err)
			}
			g.Keep(k)
			defer k.Free()
			step := func() {
				g.Reset()
				kv := c.Update(g, k, k)
				if err := g.Eval(kvArrays(kv)...); err != nil {
					t.Fatal(err)
				}
				g.Reset()
			}
			for range filled {
				step()
			}
			for range 3 {
				// MLX's peak restarts at 0 and follows the active memory
				// at each allocation: the rise is the peak past what was
				// active before.
				before := mlx.ActiveMemory()
				copied := mlx.CacheRowsCopied()
				mlx.ResetPeakMemory()
				step()
				rise := max(mlx.PeakMemory(), before) - before
				if n := mlx.CacheRowsCopied() - copied; n != 0 {
					t.Fatalf("a decode step's write copied %d bytes whole", n)
				}
				if rise*4 > uint64(c.Nbytes()) {
					t.Fatalf("a decode step raised peak memory by %d bytes, a quarter or more of the %d the cache holds", rise, c.Nbytes())
				}
				t.Logf("step at offset %d: peak rose %d bytes; the cache holds %d", c.Offset(), rise, c.Nbytes())
			}
		})
	}
}

// TestWritesCopyNothing: where peak memory cannot tell (the step's keys
// and values computed in its own graph, and the quantized caches, whose
// quantization always is), the count of bytes cache writes copied whole
// does: a decode step on a plain, a ring and a quantized cache copies none.
func TestWritesCopyNothing(t *testing.T) {
	const heads, dim, filled = 4, 64, 300
	for _, tc := range []struct {
		name string
		c    Cache
	}{
		{"plain", NewPlain()},
		{"rotating ring", NewRotating(128, 4)},
		{"quantized", NewQuantized(8, 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			defer c.Free()
			g := mlx.NewGraph(nil)
			defer g.Close()
			step := func() {
				g.Reset()
				k := g.Multiply(g.Ones([]int{1, heads, 1, dim}, mlx.Float32), g.Scalar(0.5, mlx.Float32))
				kv := c.Update(g, k, g.Add(k, k))
				if err := g.Eval(kvArrays(kv)...); err != nil {
					t.Fatal(err)
				}
				g.Reset()
			}
			for range filled {
				step()
			}
			before := mlx.CacheRowsCopied()
			for range 20 {
				step()
			}
			if n := mlx.CacheRowsCopied() - before; n != 0 {
				t.Fatalf("20 decode steps at offset %d copied %d bytes whole", c.Offset(), n)
			}
		})
	}
}

// BenchmarkDecodeWrite measures one cache write (Update and evaluation of
// what it returns) at several cache lengths: writing in place, its cost
// does not grow with the length.
func BenchmarkDecodeWrite(b *testing.B) {
	const heads, dim = 8, 128
	for _, length := range []int{256, 2048, 16384} {
		for _, kind := range []string{"plain", "quantized", "rotating"} {
			b.Run(fmt.Sprintf("%s/len=%d", kind, length), func(b *testing.B) {
				var c Cache
				switch kind {
				case "plain":
					c = NewPlain()
				case "quantized":
					c = NewQuantized(8, 64)
				default:
					c = NewRotating(length, 0)
				}
				defer c.Free()
				g := mlx.NewGraph(nil)
				defer g.Close()
				fill := g.Ones([]int{1, heads, length - 1, dim}, mlx.Float32)
				if err := g.Eval(kvArrays(c.Update(g, fill, fill))...); err != nil {
					b.Fatal(err)
				}
				g.Reset()
				k := g.Ones([]int{1, heads, 1, dim}, mlx.Float32)
				g.Keep(k)
				defer k.Free()
				// One step first: the ring reaches its full size here.
				if err := g.Eval(kvArrays(c.Update(g, k, k))...); err != nil {
					b.Fatal(err)
				}
				g.Reset()
				if c.Trimmable() {
					c.Trim(1)
				}
				b.ResetTimer()
				for range b.N {
					// Keys computed in the step's graph, as a model's are.
					step := g.MultiplyScalar(k, 2)
					kv := c.Update(g, step, step)
					if err := g.Eval(kvArrays(kv)...); err != nil {
						b.Fatal(err)
					}
					g.Reset()
					if c.Trimmable() {
						c.Trim(1) // stay at this length
					}
				}
			})
		}
	}
}

// TestEvalLayersBoundsPrefill checks that a prompt chunk evaluated layer by
// layer (EvalLayers) holds about one layer's activations at a time: its
// peak beside the caches does not grow with the depth of the stack (12
// layers against 2, on the same chunk), where evaluating every layer's
// cache at once lets it grow (logged beside it).
func TestEvalLayersBoundsPrefill(t *testing.T) {
	const n = 512
	tokens := make([]int32, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range tokens {
		tokens[i] = int32(rng.IntN(vocab))
	}
	peak := func(layers int, byLayer bool) int64 {
		m := newTestStack(t, layers, 5, 0)
		caches := make([]Cache, layers)
		specs := make([]layerSpec, layers)
		for i := range caches {
			caches[i] = NewPlain()
		}
		defer freeAll(caches)
		mlx.ClearCache()
		before := mlx.ActiveMemory()
		mlx.ResetPeakMemory()
		g := mlx.NewGraph(nil)
		m.step(g, tokens, caches, specs)
		if err := g.Err(); err != nil {
			t.Fatal(err)
		}
		g.Close()
		var err error
		if byLayer {
			err = EvalLayers(caches)
		} else {
			var all []*mlx.Array
			for _, c := range caches {
				all = append(all, c.(interface{ State() []*mlx.Array }).State()...)
			}
			err = mlx.Eval(all...)
		}
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, c := range caches {
			held += c.Nbytes()
		}
		return int64(mlx.PeakMemory()) - int64(before) - int64(held)
	}
	shallow, deep := peak(2, true), peak(12, true)
	deepAtOnce := peak(12, false)
	t.Logf("activations at the peak of a %d-token chunk: 2 layers %d KiB, 12 layers %d KiB by layer, %d KiB at once",
		n, shallow>>10, deep>>10, deepAtOnce>>10)
	if deep > shallow*3/2 {
		t.Fatalf("12 layers evaluated by layer held %d KiB of activations, 2 layers %d KiB: the peak grows with depth", deep>>10, shallow>>10)
	}
}

// TestBatchedJoinLeaveInPlace: rows merged into a batch are written into
// it in one op (peak memory rises by the batch, not by a copy of it per
// row); a row leaving a batch (the last row moved into its slot) and a row
// joining it (written into the free slot) copy a row each, not the batch:
// peak memory rises by less than a quarter of what the batch holds, and the
// batch's room stays as it was.
func TestBatchedJoinLeaveInPlace(t *testing.T) {
	const heads, dim, filled, rows = 8, 128, 1000, 8
	g := mlx.NewGraph(nil)
	defer g.Close()
	eval := func(arrs ...*mlx.Array) {
		t.Helper()
		if err := g.Eval(arrs...); err != nil {
			t.Fatal(err)
		}
		g.Reset()
	}
	prefilled := func(n int) *Plain {
		c := NewPlain()
		k := g.Ones([]int{1, heads, n, dim}, mlx.Float32)
		eval(kvArrays(c.Update(g, k, k))...)
		return c
	}
	singles := make([]Cache, rows)
	for i := range singles {
		singles[i] = prefilled(filled - 10*i)
	}
	before := mlx.ActiveMemory()
	mlx.ResetPeakMemory()
	b, err := Merge(g, singles)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	eval(b.State()...)
	freeAll(singles)
	if rise := max(mlx.PeakMemory(), before) - before; rise > uint64(b.Nbytes())*5/4 {
		t.Errorf("merging %d rows raised peak memory by %d bytes; the batch holds %d", rows, rise, b.Nbytes())
	} else {
		t.Logf("merging %d rows: peak rose %d bytes; the batch holds %d", rows, rise, b.Nbytes())
	}
	step := func() {
		t.Helper()
		sg := mlx.NewGraph(nil) // a graph of its own: a step binds its rows' offsets
		defer sg.Close()
		b.Mask(sg, 1, 0, false)
		k := sg.Ones([]int{b.Rows(), heads, 1, dim}, mlx.Float32)
		if err := sg.Eval(kvArrays(b.Update(sg, k, k))...); err != nil {
			t.Fatal(err)
		}
	}
	step()
	slots, bytes := b.RowCapacity(), b.Nbytes()
	measure := func(what string, f func() error) {
		t.Helper()
		// MLX's peak restarts at 0 and follows the active memory at each
		// allocation: the rise is the peak (or, when nothing was
		// allocated, the active memory) past what was active before.
		before := mlx.ActiveMemory()
		mlx.ResetPeakMemory()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		eval(b.State()...)
		rise := max(mlx.PeakMemory(), mlx.ActiveMemory(), before) - before
		if rise*4 > uint64(bytes) {
			t.Errorf("%s raised peak memory by %d bytes, a quarter or more of the %d the batch holds", what, rise, bytes)
		}
		if b.RowCapacity() != slots || b.Nbytes() != bytes {
			t.Errorf("after %s the batch has room for %d rows in %d bytes, before %d in %d", what, b.RowCapacity(), b.Nbytes(), slots, bytes)
		}
		t.Logf("%s: peak rose %d bytes; the batch holds %d", what, rise, bytes)
	}
	measure("a leave", func() error { return b.Filter(g, []int{0, 1, 2, 7, 4, 5, 6}) })
	step()
	joining, err := Merge(g, []Cache{prefilled(900)})
	if err != nil {
		t.Fatal(err)
	}
	defer joining.Free()
	eval(joining.State()...)
	measure("a join", func() error { return b.Extend(g, joining) })
	step()
}
