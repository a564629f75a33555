package mlx

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
)

// onThread runs f on a goroutine locked to an OS thread of its own, which
// ends with it: the next call gets a thread MLX has never seen, as Go's
// scheduler may hand any goroutine.
func onThread(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		defer close(done)
		f()
	}()
	<-done
}

// TestFreshThreads evaluates, on a new OS thread each time, arrays made and
// evaluated on other threads: a step built on one thread whose inputs were
// queued from another, the pattern of a decode loop the Go scheduler moves
// between threads.
func TestFreshThreads(t *testing.T) {
	var x, y, z *Array
	var err error
	onThread(func() {
		g := NewGraph(nil)
		defer g.Close()
		x = g.Full([]int{4, 4}, 1, Float32)
		if err = g.Eval(x); err == nil {
			g.Keep(x)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	onThread(func() {
		// x is evaluated already: nothing of this eval is left to schedule.
		err = Eval(x)
	})
	if err != nil {
		t.Fatal("eval of an evaluated array on a new thread:", err)
	}
	onThread(func() {
		g := NewGraph(nil)
		defer g.Close()
		y = g.Matmul(x, x)
		if err = g.AsyncEval(y); err == nil {
			g.Keep(y)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	onThread(func() {
		g := NewGraph(nil)
		defer g.Close()
		z = g.Add(y, x)
		if err = g.AsyncEval(z); err == nil {
			g.Keep(z)
		}
	})
	if err != nil {
		t.Fatal("async eval on a new thread of a step queued on another:", err)
	}
	defer z.Free()
	var v []float32
	onThread(func() { v, err = z.Float32s() })
	if err != nil {
		t.Fatal("read on a new thread:", err)
	}
	if v[0] != 5 {
		t.Fatalf("z[0] = %g, want 5", v[0])
	}
}

// TestQuantizedMatmulFreshThreads builds a quantized matmul whose input and
// scales differ in dtype (float32 activations, float16 scales, as a GGUF
// checkpoint's) on one thread, queues it from another and reads it on a
// third.
func TestQuantizedMatmulFreshThreads(t *testing.T) {
	var q Quantized
	var x *Array
	var err error
	onThread(func() {
		g := NewGraph(nil)
		defer g.Close()
		w := g.Normal([]int{64, 64}, Float32, 0, 1, g.RandomKey(3))
		q = g.Quantize(w, 32, 4)
		q.Scales = g.AsType(q.Scales, Float16)
		q.Biases = g.AsType(q.Biases, Float16)
		x = g.Ones([]int{1, 64}, Float32)
		if err = g.Eval(q.Weight, q.Scales, q.Biases, x); err == nil {
			g.Keep(q.Weight, q.Scales, q.Biases, x)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { q.Weight.Free(); q.Scales.Free(); q.Biases.Free(); x.Free() }()
	// Go moves a goroutine between threads while it builds a graph: here
	// the graph is built on one thread and queued from the next.
	g := NewGraph(nil)
	defer g.Close()
	var y *Array
	onThread(func() { y = g.QuantizedMatmul(x, q, true) })
	onThread(func() { err = g.AsyncEval(y) })
	if err != nil {
		t.Fatal("queueing on a new thread:", err)
	}
	onThread(func() { _, err = y.Float32s() })
	if err != nil {
		t.Fatal("evaluating on a new thread:", err)
	}
	if y.Dtype() != Float32 {
		t.Fatalf("dtype %s, want float32", y.Dtype())
	}
}

// TestPoolConcurrentJobs runs, from several goroutines each with a stream
// of its own, native kernels that split their work over the pool's
// workers (a product past 2^18 multiply-adds, a prefill-sized attention)
// among ones that do not, many times over, while the workers poll between jobs
// and sleep when none come: every result must equal the one computed
// alone, bit for bit (a kernel's result does not depend on how its work
// was split).
func TestPoolConcurrentJobs(t *testing.T) {
	const workers, rounds = 4, 12
	build := func(g *Graph, seed uint64) *Array {
		key := func(i uint64) *Array { return g.RandomKey(seed*10 + i) }
		q := g.Quantize(g.Normal([]int{1536, 576}, Float32, 0, 0.2, key(0)), 32, 4)
		x := g.Normal([]int{3, 576}, Float32, 0, 1, key(1))
		y := g.QuantizedMatmul(x, q, true) // [3, 1536]
		y = g.SwiGLU(y, g.Normal([]int{3, 1536}, Float32, 0, 1, key(2)))
		y = g.RMSNorm(y, nil, 1e-5)
		qkv := g.Normal([]int{3, 4, 64, 64}, Float32, 0, 1, key(3))
		o := g.SDPA(qkv, qkv, qkv, 0.125, CausalMask)
		return g.Add(g.Sum(y, false, 1), g.Sum(g.Reshape(o, 3, -1), false, 1))
	}
	want := make([][]float32, workers)
	for w := range want {
		g := NewGraph(nil)
		v, err := build(g, uint64(w)).Float32s()
		g.Close()
		if err != nil {
			t.Fatal(err)
		}
		want[w] = v
	}
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			s, err := NewStream(Device{Type: CPU})
			if err != nil {
				errs <- err
				return
			}
			for r := 0; r < rounds; r++ {
				g := NewGraph(s)
				v, err := build(g, uint64(w)).Float32s()
				g.Close()
				if err != nil {
					errs <- err
					return
				}
				for i := range v {
					if math.Float32bits(v[i]) != math.Float32bits(want[w][i]) {
						errs <- fmt.Errorf("goroutine %d, round %d, element %d: %g, alone %g", w, r, i, v[i], want[w][i])
						return
					}
				}
				if r%4 == 3 {
					time.Sleep(2 * time.Millisecond) // let the workers go to sleep between jobs
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
