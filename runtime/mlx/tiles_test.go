package mlx

import (
	"fmt"
	"math"
	"testing"
)

// BenchmarkTileProducts times a prompt's product at the Llama-3.2-1B MLP's
// up-projection shape (8192 x 2048, 4-bit groups of 64 with bfloat16
// scales, as mlx-community's files; and bfloat16 W) for 512 rows of x (and
// 16: a batch of 16 decode steps), with the tile unit off and in each of
// its part counts.
func BenchmarkTileProducts(b *testing.B) {
	const n, k = 8192, 2048
	for _, m := range []int{512, 16} {
		benchmarkTileProducts(b, n, k, m)
	}
}

func benchmarkTileProducts(b *testing.B, n, k, m int) {
	modes := []int{TilesOff}
	if SetNativeTiles(TilesAuto) != TilesOff || NativeTiles() != TilesOff {
		modes = append(modes, 1, 2, 3)
	}
	for _, w := range []string{"q4g64", "bf16"} {
		for _, mode := range modes {
			b.Run(fmt.Sprintf("%s/rows=%d/tiles=%d", w, m, mode), func(b *testing.B) {
				prev := SetNativeTiles(mode)
				defer SetNativeTiles(prev)
				g := NewGraph(nil)
				defer g.Close()
				k1, k2 := g.RandomSplit(g.RandomKey(7))
				wf := g.Normal([]int{n, k}, Float32, 0, 0.02, k1)
				x := g.Normal([]int{m, k}, Float32, 0, 1, k2)
				var q Quantized
				var wb *Array
				if w == "q4g64" {
					q = g.Quantize(wf, 64, 4)
					q.Scales = g.AsType(q.Scales, BFloat16)
					q.Biases = g.AsType(q.Biases, BFloat16)
					if err := g.Eval(x, q.Weight, q.Scales, q.Biases); err != nil {
						b.Fatal(err)
					}
				} else {
					wb = g.AsType(wf, BFloat16)
					if err := g.Eval(x, wb); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var y *Array
					if wb != nil {
						y = g.Linear(x, wb)
					} else {
						y = g.QuantizedMatmul(x, q, true)
					}
					if err := g.Eval(y); err != nil {
						b.Fatal(err)
					}
					y.Free()
				}
				b.ReportMetric(2*float64(m*n*k)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
			})
		}
	}
}

// tileUnitRuns reports whether the tile unit runs here at the process's
// instruction set (whatever mode the environment set).
func tileUnitRuns() bool {
	prev := SetNativeTiles(TilesAuto)
	defer SetNativeTiles(prev)
	return NativeTiles() != TilesOff
}

// tileUnits lists the tile unit's part counts to test, or skips t where
// the CPU does not run it.
func tileUnits(t *testing.T) []int {
	t.Helper()
	if !tileUnitRuns() {
		t.Skip("this machine has no tile unit (Intel AMX with bfloat16) or runs AVX2 only: the tile path is not covered here")
	}
	return []int{1, 2, 3}
}

// tileBound is how far a tile product of T parts may be from the exact
// product of the float32 values: mag (the sum of |x w|) times the relative
// error of each product's parts (x and W rounded to bfloat16 once, unit
// roundoff u = 2^-9, or carried as a pair, u^2; a W stored as bfloat16 is
// exact in its first part; three parts leave out lo x lo, at most u^2),
// plus float32 sums over the K * T products.
func tileBound(terms, k int, wExact bool, mag float64) float64 {
	u := math.Ldexp(1, -9)
	ex, ew, dropped := u, u, 0.0
	switch terms {
	case 2:
		ex = u * u
	case 3:
		ex, ew, dropped = u*u, u*u, u*u
	}
	if wExact {
		ew, dropped = 0, 0
	}
	return mag*((1+ex)*(1+ew)-1+dropped+float64(k*terms+2)*math.Ldexp(1, -24)) + 1e-30
}

// TestTileProducts: products of many rows of x on the tile unit, with x
// and W in one, two or three bfloat16 parts, for every kind of W the
// panels take (float32, bfloat16, float16; affine 4 and 8 bits in groups
// of 32, 64 and 128 with float32, bfloat16 and float16 scales), rows of x
// and of W that are not whole tiles, and widths that are not whole steps (72),
// against the float64 product of the same float32 values within
// tileBound; and each part count must differ from the panels somewhere.
func TestTileProducts(t *testing.T) {
	parts := tileUnits(t)
	type wcase struct {
		name string
		k    int
		make func(g *Graph, wf *Array) (func(x *Array) *Array, *Array, bool)
	}
	var cases []wcase
	for _, dt := range []Dtype{Float32, BFloat16, Float16} {
		for _, k := range []int{72, 256} {
			dt := dt
			cases = append(cases, wcase{fmt.Sprint(dt, "_k", k), k, func(g *Graph, wf *Array) (func(*Array) *Array, *Array, bool) {
				w := g.AsType(wf, dt)
				return func(x *Array) *Array { return g.Linear(x, w) }, g.AsType(w, Float32), dt == BFloat16
			}})
		}
	}
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, sdt := range []Dtype{Float32, BFloat16, Float16} {
				bits, group, sdt := bits, group, sdt
				cases = append(cases, wcase{fmt.Sprint("b", bits, "_g", group, "_s", sdt), 256, func(g *Graph, wf *Array) (func(*Array) *Array, *Array, bool) {
					q := g.Quantize(wf, group, bits)
					q.Scales, q.Biases = g.AsType(q.Scales, sdt), g.AsType(q.Biases, sdt)
					q32 := q
					q32.Scales, q32.Biases = g.AsType(q.Scales, Float32), g.AsType(q.Biases, Float32)
					return func(x *Array) *Array { return g.QuantizedMatmul(x, q, true) }, g.Dequantize(q32, Float32), false
				}})
			}
		}
	}
	for _, c := range cases {
		for _, terms := range parts {
			for _, sh := range [][2]int{{9, 40}, {16, 16}, {17, 300}, {130, 33}} {
				m, n := sh[0], sh[1]
				t.Run(fmt.Sprintf("%s/t%d/m%d_n%d", c.name, terms, m, n), func(t *testing.T) {
					g := NewGraph(nil)
					defer g.Close()
					k1, k2 := g.RandomSplit(g.RandomKey(uint64(m*1000 + n)))
					wf := g.Normal([]int{n, c.k}, Float32, 0, 0.2, k1)
					x := g.Normal([]int{m, c.k}, Float32, 0, 1, k2)
					product, wvals, exact := c.make(g, wf)
					var outs [2][]float32
					for i, mode := range []int{terms, TilesOff} {
						prev := SetNativeTiles(mode)
						y := product(x)
						err := g.Eval(y)
						SetNativeTiles(prev)
						if err != nil {
							t.Fatal(err)
						}
						if y.Dtype() != Float32 {
							t.Fatalf("output %s, want float32", y.Dtype())
						}
						outs[i], _ = y.Float32s()
					}
					if err := g.Eval(wvals); err != nil {
						t.Fatal(err)
					}
					xs, _ := x.Float32s()
					ws, _ := wvals.Float32s()
					same := true
					for i := 0; i < m; i++ {
						for r := 0; r < n; r++ {
							var want, mag float64
							for kk := 0; kk < c.k; kk++ {
								p := float64(xs[i*c.k+kk]) * float64(ws[r*c.k+kk])
								want += p
								mag += math.Abs(p)
							}
							got := float64(outs[0][i*n+r])
							if d, b := math.Abs(got-want), tileBound(terms, c.k, exact, mag); d > b {
								t.Fatalf("row %d of x, row %d of W: %g, want %g (off by %g, bound %g)", i, r, got, want, d, b)
							}
							same = same && outs[0][i*n+r] == outs[1][i*n+r]
						}
					}
					if same {
						t.Fatalf("the tile unit gave the panels' results bit for bit; is it running?")
					}
				})
			}
		}
	}
}

// TestTileGatherProducts: the experts' products (GatherQMM) of experts with
// more rows than decode's kernels take, on the tile unit, for affine 4 and
// 8 bits and mxfp4, against the exact product of each row by its expert's
// float32 values within tileBound; each part count must differ from the
// panels somewhere.
func TestTileGatherProducts(t *testing.T) {
	parts := tileUnits(t)
	const E, K, N, tokens, top = 4, 256, 40, 48, 2 // about 24 rows an expert
	for _, c := range []struct {
		mode        string
		bits, group int
	}{{"affine", 4, 64}, {"affine", 8, 32}, {"mxfp4", 4, 32}} {
		for _, terms := range parts {
			t.Run(fmt.Sprintf("%s_b%d_g%d/t%d", c.mode, c.bits, c.group, terms), func(t *testing.T) {
				g := NewGraph(nil)
				defer g.Close()
				x, idx := moeInputs(g, uint64(c.bits+terms), tokens, top, E, K, Float32)
				q := g.QuantizeMode(g.Normal([]int{E, N, K}, Float32, 0, 0.2, g.RandomKey(3)), c.group, c.bits, c.mode)
				if c.mode == "affine" {
					q.Scales, q.Biases = g.AsType(q.Scales, BFloat16), g.AsType(q.Biases, BFloat16)
				}
				if err := g.Eval(x, idx, q.Weight, q.Scales); err != nil {
					t.Fatal(err)
				}
				var outs [2][]float32
				for i, mode := range []int{terms, TilesOff} {
					prev := SetNativeTiles(mode)
					y := g.GatherQMM(x, q, nil, idx, true, false)
					err := g.Eval(y)
					SetNativeTiles(prev)
					if err != nil {
						t.Fatal(err)
					}
					outs[i] = values(t, g, y)
				}
				q32 := q
				if c.mode == "affine" {
					q32.Scales, q32.Biases = g.AsType(q.Scales, Float32), g.AsType(q.Biases, Float32)
				}
				wv := values(t, g, g.Dequantize(q32, Float32)) // [E, N, K]
				xv := values(t, g, x)
				ids, err := g.AsType(idx, Int32).Int32s()
				if err != nil {
					t.Fatal(err)
				}
				same := true
				for tok := 0; tok < tokens; tok++ {
					for j := 0; j < top; j++ {
						e := int(ids[tok*top+j])
						for n := 0; n < N; n++ {
							var want, mag float64
							for k := 0; k < K; k++ {
								p := float64(xv[tok*K+k]) * float64(wv[(e*N+n)*K+k])
								want += p
								mag += math.Abs(p)
							}
							i := (tok*top+j)*N + n
							got := float64(outs[0][i])
							if d, b := math.Abs(got-want), tileBound(terms, K, c.mode == "mxfp4", mag); d > b {
								t.Fatalf("token %d, expert %d, row %d: %g, want %g (off by %g, bound %g)", tok, e, n, got, want, d, b)
							}
							same = same && outs[0][i] == outs[1][i]
						}
					}
				}
				if same {
					t.Fatalf("the tile unit gave the panels' results bit for bit; is it running?")
				}
			})
		}
	}
}
