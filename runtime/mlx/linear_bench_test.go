package mlx

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the CPU time the process has used (every thread, user and
// system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timeChain times b.N rounds of chain products made by op, each round
// evaluated at once, and reports the process's CPU time per product
// (cpu-us/op) and the wall-clock rate of reading bytes per product (GB/s).
func timeChain(b *testing.B, g *Graph, chain int, bytes float64, op func() *Array) {
	b.Helper()
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		outs := make([]*Array, chain)
		for c := range outs {
			outs[c] = op()
		}
		if err := g.Eval(outs...); err != nil {
			b.Fatal(err)
		}
		for _, o := range outs {
			o.Free()
		}
	}
	ops := float64(b.N * chain)
	b.ReportMetric(float64(cpuTime()-c0)/1e3/ops, "cpu-us/op")
	b.ReportMetric(bytes/(b.Elapsed().Seconds()/ops)/1e9, "GB/s")
}

// BenchmarkLinear times a half-precision linear layer, x W^T, on
// SmolLM2-135M's shapes (the MLP's 1536 x 576 up-projection and its 576 x
// 1536 down-projection) for one row of x (a decode step) and 4 rows: the
// native kernel (impl=archgen) and libmlx's matmul by the transpose
// (impl=libmlx) side by side in one run. It reports the wall-clock GB/s
// of weights read and the process's CPU time per product (cpu-us/op),
// which a loaded machine moves less than the wall clock.
func BenchmarkLinear(b *testing.B) {
	const chain = 8
	for _, dt := range []Dtype{BFloat16, Float16} {
		for _, sh := range [][2]int{{1536, 576}, {576, 1536}} {
			for _, m := range []int{1, 4} {
				for _, impl := range []string{"archgen", "libmlx"} {
					n, k := sh[0], sh[1]
					b.Run(fmt.Sprintf("%s/%dx%d/rows=%d/impl=%s", dt, n, k, m, impl), func(b *testing.B) {
						g := NewGraph(nil)
						defer g.Close()
						k1, k2 := g.RandomSplit(g.RandomKey(11))
						w := g.AsType(g.Normal([]int{n, k}, Float32, 0, 0.2, k1), dt)
						x := g.AsType(g.Normal([]int{m, k}, Float32, 0, 1, k2), dt)
						if err := g.Eval(x, w); err != nil {
							b.Fatal(err)
						}
						wt := g.Transpose(w)
						timeChain(b, g, chain, float64(n*k*2), func() *Array {
							if impl == "archgen" {
								return g.Linear(x, w)
							}
							return g.Matmul(x, wt)
						})
					})
				}
			}
		}
	}
}

// BenchmarkQuantizedMatmulHalf times a 4-bit product (groups of 64) with a
// bfloat16 input and bfloat16 scales, as mlx-community's 4-bit checkpoints
// run, on SmolLM2-135M's 1536 x 576 shape, each way it can run side by side:
// impl=exact (the native kernel in libmlx's rounding, the default),
// impl=f32 (the native float32 kernels) and impl=libmlx (libmlx's kernel),
// in GB/s of packed weights and CPU time per product.
func BenchmarkQuantizedMatmulHalf(b *testing.B) {
	const n, k, chain = 1536, 576, 8
	for _, m := range []int{1, 4} {
		for _, impl := range []struct {
			name string
			mode int
		}{{"exact", HalfQMMExact}, {"f32", HalfQMMFloat32}, {"libmlx", HalfQMMLibmlx}} {
			b.Run(fmt.Sprintf("rows=%d/impl=%s", m, impl.name), func(b *testing.B) {
				prev := setNativeQuantizedMatmulHalf(impl.mode)
				defer setNativeQuantizedMatmulHalf(prev)
				g := NewGraph(nil)
				defer g.Close()
				k1, k2 := g.RandomSplit(g.RandomKey(7))
				q := g.Quantize(g.AsType(g.Normal([]int{n, k}, Float32, 0, 0.2, k1), BFloat16), 64, 4)
				x := g.AsType(g.Normal([]int{m, k}, Float32, 0, 1, k2), BFloat16)
				if err := g.Eval(x, q.Weight, q.Scales, q.Biases); err != nil {
					b.Fatal(err)
				}
				timeChain(b, g, chain, float64(n*k/2+n*k/64*4), func() *Array { return g.QuantizedMatmul(x, q, true) })
			})
		}
	}
}
