package mlx

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
)

// weights is a tiny two-layer block, kept across graphs as a model's are.
type weights struct {
	w1, w2, norm *Array
}

func newWeights(t testing.TB) weights {
	g := NewGraph(nil)
	defer g.Close()
	key := g.RandomKey(7)
	k1, k2 := g.RandomSplit(key)
	w := weights{
		w1:   g.Normal([]int{64, 32}, Float32, 0, 0.1, k1),
		w2:   g.Normal([]int{32, 64}, Float32, 0, 0.1, k2),
		norm: g.Ones([]int{64}, Float32),
	}
	if err := g.Eval(w.w1, w.w2, w.norm); err != nil {
		t.Fatal(err)
	}
	g.Keep(w.w1, w.w2, w.norm)
	return w
}

func (w weights) free() { w.w1.Free(); w.w2.Free(); w.norm.Free() }

// forward builds one forward-like graph: norm, two matmuls, an activation,
// a residual, a softmax.
func (w weights) forward(g *Graph, x *Array) *Array {
	h := g.RMSNorm(x, w.norm, 1e-5)
	h = g.SiLU(g.Matmul(h, w.w1))
	h = g.Add(x, g.Matmul(h, w.w2))
	return g.Softmax(h, true, -1)
}

// TestMemoryFlat builds and evaluates 1000 forward-like graphs and checks
// that MLX's active memory does not grow: every array a graph made is gone
// at Close.
func TestMemoryFlat(t *testing.T) {
	w := newWeights(t)
	defer w.free()
	step := func(i int) {
		g := NewGraph(nil)
		defer g.Close()
		x := g.Full([]int{4, 64}, float64(i%7)/7, Float32)
		y := w.forward(g, x)
		if err := g.Eval(y); err != nil {
			t.Fatal(err)
		}
		if _, err := y.Float32s(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		step(i)
	}
	base := ActiveMemory()
	for i := 0; i < 1000; i++ {
		step(i)
	}
	if got := ActiveMemory(); got != base {
		t.Fatalf("active memory went from %d to %d bytes over 1000 graphs", base, got)
	}
	// The same with one graph Reset between steps.
	g := NewGraph(nil)
	defer g.Close()
	for i := 0; i < 1000; i++ {
		g.Reset()
		y := w.forward(g, g.Full([]int{4, 64}, 0.5, Float32))
		if err := g.Eval(y); err != nil {
			t.Fatal(err)
		}
	}
	g.Reset()
	if got := ActiveMemory(); got != base {
		t.Fatalf("active memory went from %d to %d bytes over 1000 Reset steps", base, got)
	}
}

// TestGoroutines drives MLX from 8 goroutines at once, on the shared stream
// and on streams of their own; run it under -race too.
func TestGoroutines(t *testing.T) {
	w := newWeights(t)
	defer w.free()
	expect := func(i int) []float32 {
		g := NewGraph(nil)
		defer g.Close()
		y := w.forward(g, g.Full([]int{2, 64}, float64(i)/10, Float32))
		v, err := evalRead(g, y)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := make([][]float32, 8)
	for i := range want {
		want[i] = expect(i)
	}
	for _, own := range []bool{false, true} {
		t.Run(fmt.Sprintf("own_stream=%v", own), func(t *testing.T) {
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					s := DefaultStream()
					if own {
						var err error
						if s, err = NewStream(Device{Type: CPU}); err != nil {
							errs <- err
							return
						}
					}
					for it := 0; it < 40; it++ {
						if it%5 == 0 {
							runtime.Gosched()
						}
						g := NewGraph(s)
						y := w.forward(g, g.Full([]int{2, 64}, float64(i)/10, Float32))
						v, err := evalRead(g, y)
						g.Close()
						if err != nil {
							errs <- err
							return
						}
						for j := range v {
							if math.Abs(float64(v[j]-want[i][j])) > 1e-6 {
								errs <- fmt.Errorf("goroutine %d: element %d is %g, want %g", i, j, v[j], want[i][j])
								return
							}
						}
					}
				}(i)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func evalRead(g *Graph, y *Array) ([]float32, error) {
	if err := g.Eval(y); err != nil {
		return nil, err
	}
	return y.Float32s()
}

func TestStreams(t *testing.T) {
	if n := DeviceCount(CPU); n < 1 {
		t.Fatalf("%d cpu devices", n)
	}
	if DeviceCount(GPU) == 0 {
		if _, err := NewStream(Device{Type: GPU}); err == nil {
			t.Fatal("a gpu stream without a gpu")
		}
	}
	s, err := NewStream(Device{Type: CPU})
	if err != nil {
		t.Fatal(err)
	}
	if s.Device() != (Device{Type: CPU}) {
		t.Fatalf("device %v", s.Device())
	}
	g := NewGraph(s)
	defer g.Close()
	x := g.Arange(0, 5, 1, Float32)
	if err := g.AsyncEval(x); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	v, err := x.Float32s()
	if err != nil || v[4] != 4 {
		t.Fatalf("%v %v", v, err)
	}
	if Version() != "0.32.4" {
		t.Fatalf("libmlx %s, the pinned version is 0.32.4", Version())
	}
}

func TestMemoryFigures(t *testing.T) {
	ResetPeakMemory()
	g := NewGraph(nil)
	x := g.Zeros([]int{1 << 20}, Float32) // 4 MiB
	if err := g.Eval(x); err != nil {
		t.Fatal(err)
	}
	if a := ActiveMemory(); a < 4<<20 {
		t.Fatalf("active memory %d with a 4 MiB array alive", a)
	}
	if p := PeakMemory(); p < 4<<20 {
		t.Fatalf("peak memory %d", p)
	}
	before := ActiveMemory()
	g.Close()
	if a := ActiveMemory(); a > before-4<<20 {
		t.Fatalf("active memory %d after freeing 4 MiB of %d", a, before)
	}
	prev := SetCacheLimit(0)
	ClearCache()
	if c := CacheMemory(); c != 0 {
		t.Fatalf("cache memory %d after clearing with no cache allowed", c)
	}
	SetCacheLimit(prev)
	old := SetMemoryLimit(1 << 30)
	if MemoryLimit() != 1<<30 {
		t.Fatalf("memory limit %d", MemoryLimit())
	}
	SetMemoryLimit(old)
}

// TestThreadHops builds graphs on one OS thread and evaluates and reads
// them on others, with ops MLX builds partly on the default stream
// (quantized_matmul casts a float32 input to float16 scales' dtype so):
// no OS thread's own stream may end up in a graph.
func TestThreadHops(t *testing.T) {
	g := NewGraph(nil)
	defer g.Close()
	var y, z *Array
	onThread(func() {
		w := g.AsType(g.Reshape(g.Arange(0, 64*64, 1, Float32), 64, 64), Float16)
		q := g.Quantize(g.DivideScalar(w, 4096), 32, 4)
		x := g.Full([]int{1, 64}, 0.5, Float32)
		y = g.QuantizedMatmul(x, q, true)
	})
	onThread(func() {
		if err := g.AsyncEval(y); err != nil {
			t.Error(err)
		}
	})
	onThread(func() { z = g.Sum(y, false) })
	onThread(func() {
		if _, err := z.Item(); err != nil {
			t.Error(err)
		}
	})
}
