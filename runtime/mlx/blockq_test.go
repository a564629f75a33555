package mlx

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/archgen/archgen/internal/npy"
)

// blockRefs writes random rows of every block format and llama.cpp's
// reference values of them (gguf-py's dequantize) into a temporary
// directory: rows x k values each.
func blockRefs(t *testing.T, rows, k int) string {
	t.Helper()
	dir := t.TempDir()
	runPython(t, "testdata/block_ref.py", dir, strconv.Itoa(rows), strconv.Itoa(k))
	return dir
}

func readBlockRef(t *testing.T, dir string, f BlockFormat, rows, k int) ([]byte, []float32) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, f.Name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != rows*f.RowBytes(k) {
		t.Fatalf("%s: %d bytes, want %d rows of %d", f.Name, len(raw), rows, f.RowBytes(k))
	}
	ref, err := npy.ReadFile(filepath.Join(dir, f.Name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	return raw, ref.Data.([]float32)
}

// TestBlockDequantize: every block format's rows decode to llama.cpp's
// reference values bit for bit (random bytes, so every code of every
// field is met), in float32; in float16 and bfloat16 as those values
// rounded.
func TestBlockDequantize(t *testing.T) {
	const rows, k = 37, 512
	dir := blockRefs(t, rows, k)
	for _, f := range BlockFormats() {
		t.Run(f.Name, func(t *testing.T) {
			raw, ref := readBlockRef(t, dir, f, rows, k)
			g := NewGraph(nil)
			defer g.Close()
			w := FromSlice(g, raw, rows, f.RowBytes(k))
			for _, dt := range []Dtype{Float32, Float16, BFloat16} {
				y := g.AsType(g.BlockDequantize(w, f, dt), Float32)
				want := g.AsType(g.AsType(FromSlice(g, ref, rows, k), dt), Float32)
				if err := g.Eval(y, want); err != nil {
					t.Fatal(err)
				}
				got, _ := y.Float32s()
				exp, _ := want.Float32s()
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(exp[i]) && !(got[i] == 0 && exp[i] == 0) {
						t.Fatalf("%v: value %d (row %d, column %d) is %g, llama.cpp's %g", dt, i, i/k, i%k, got[i], exp[i])
					}
				}
			}
		})
	}
}

// TestBlockMatmul: products of x by every block format's rows, for rows
// of x read from the blocks directly on the integer grid (up to 8) and on
// the panels (more), against the float64 product of llama.cpp's reference
// values, within what rounding x to 16 bits per 32 values moves them; on
// each instruction set the host runs.
func TestBlockMatmul(t *testing.T) {
	const rows, k = 37, 512
	dir := blockRefs(t, rows, k)
	for _, f := range BlockFormats() {
		raw, ref := readBlockRef(t, dir, f, rows, k)
		for _, isa := range ProductISAs(t) {
			for _, m := range []int{1, 2, 3, 4, 5, 8, 9, 33} {
				for _, xdt := range []Dtype{Float32, BFloat16} {
					t.Run(fmt.Sprint(f.Name, "_", isa.Name, "_m", m, "_", xdt), func(t *testing.T) {
						defer isa.Set()()
						g := NewGraph(nil)
						defer g.Close()
						x := g.AsType(g.Normal([]int{m, k}, Float32, 0, 1, g.RandomKey(uint64(m))), xdt)
						w := FromSlice(g, raw, rows, f.RowBytes(k))
						y := g.AsType(g.BlockMatmul(x, w, f), Float32)
						xf := g.AsType(x, Float32)
						if err := g.Eval(y, xf); err != nil {
							t.Fatal(err)
						}
						if y.Dtype() != Float32 || g.BlockMatmul(x, w, f).Dtype() != xdt {
							t.Fatalf("output dtype is not x's")
						}
						got, _ := y.Float32s()
						xs, _ := xf.Float32s()
						for i := 0; i < m; i++ {
							for n := 0; n < rows; n++ {
								// x is rounded to 16 bits per 32 values: each
								// value moves by at most half its chunk's step
								var want, mag, grid float64
								for c0 := 0; c0 < k; c0 += 32 {
									var amax, wabs float64
									for c := c0; c < c0+32; c++ {
										p := float64(xs[i*k+c]) * float64(ref[n*k+c])
										want += p
										mag += math.Abs(p)
										amax = math.Max(amax, math.Abs(float64(xs[i*k+c])))
										wabs += math.Abs(float64(ref[n*k+c]))
									}
									grid += amax / 32767 / 2 * wabs
								}
								tol := grid + 1e-6*mag + 1e-30
								if terms := tileTerms(m, 0, xdt, false, true); terms != 0 {
									// On the tile unit: x in two bfloat16 parts
									// (not on the grid), W rounded to bfloat16.
									tol = tileBound(terms, k, false, mag)
								}
								if xdt != Float32 {
									tol = 4e-3*mag + 1e-30 // the output rounds to bfloat16
								}
								if d := math.Abs(float64(got[i*rows+n]) - want); d > tol {
									t.Fatalf("row %d of x, row %d of W: %g, want %g (off by %g, tolerance %g)", i, n, got[i*rows+n], want, d, tol)
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestBlockQMM16IsItsOwnPath: on an AVX-512 machine, products of more
// than 8 rows of x by each block format run on the 16-bit integer panels
// (TestBlockMatmul holds them to llama.cpp's values): switched off, the
// float32 panels multiply the same rounded x, and the two must differ in
// the last bits somewhere.
func TestBlockQMM16IsItsOwnPath(t *testing.T) {
	requireQMM16(t)
	const rows, k = 37, 512
	dir := blockRefs(t, rows, k)
	for _, f := range BlockFormats() {
		t.Run(f.Name, func(t *testing.T) {
			raw, _ := readBlockRef(t, dir, f, rows, k)
			g := NewGraph(nil)
			defer g.Close()
			x := g.Normal([]int{20, k}, Float32, 0, 1, g.RandomKey(3))
			w := FromSlice(g, raw, rows, f.RowBytes(k))
			pathDiffers(t, "the integer panels gave the float32 panels' results", setQMM16,
				func() ([]float32, error) { return g.BlockMatmul(x, w, f).Float32s() })
		})
	}
}

// TestBlockGatherMatmul: the experts' products over stacks of every block
// format (4 experts of 8 rows): each token's row times each expert picked
// for it equals BlockMatmul of that row by that expert's matrix alone, to
// the bit where an expert has at most 8 rows of x (both multiply on x's
// integer grid) and within float32 rounding where it has more (panels;
// on the tile unit within tileBound besides); on each instruction set the
// host runs.
func TestBlockGatherMatmul(t *testing.T) {
	const rows, k, experts, n = 37, 512, 4, 8
	dir := blockRefs(t, rows, k)
	for _, f := range BlockFormats() {
		raw, ref := readBlockRef(t, dir, f, rows, k)
		rb := f.RowBytes(k)
		for _, isa := range ProductISAs(t) {
			for _, tokens := range []int{1, 3, 40} {
				for _, xdt := range []Dtype{Float32, BFloat16} {
					t.Run(fmt.Sprint(f.Name, "_", isa.Name, "_t", tokens, "_", xdt), func(t *testing.T) {
						defer isa.Set()()
						g := NewGraph(nil)
						defer g.Close()
						picks := make([]uint32, 2*tokens)
						for i := 0; i < tokens; i++ {
							picks[2*i] = uint32(i % experts)
							picks[2*i+1] = uint32((3*i + 1) % experts)
							if picks[2*i+1] == picks[2*i] {
								picks[2*i+1] = (picks[2*i] + 2) % experts
							}
						}
						x := g.AsType(g.Normal([]int{tokens, 1, 1, k}, Float32, 0, 1, g.RandomKey(uint64(tokens))), xdt)
						w := FromSlice(g, raw[:experts*n*rb], experts, n, rb)
						q := Quantized{Weight: w, GroupSize: f.Values, Bits: f.Bits, Mode: f.Mode}
						y := g.AsType(g.GatherQMM(x, q, nil, FromSlice(g, picks, tokens, 2), true, false), Float32)
						outs := make([]*Array, 0, 2*tokens)
						for i := 0; i < 2*tokens; i++ {
							e := int(picks[i])
							xi := g.Reshape(g.Slice(x, []int{i / 2, 0, 0, 0}, []int{i/2 + 1, 1, 1, k}), 1, k)
							we := g.Reshape(g.Slice(w, []int{e, 0, 0}, []int{e + 1, n, rb}), n, rb)
							outs = append(outs, g.AsType(g.BlockMatmul(xi, we, f), Float32))
						}
						xf := g.AsType(x, Float32)
						if err := g.Eval(append(outs, y, xf)...); err != nil {
							t.Fatal(err)
						}
						if s := y.Shape(); len(s) != 4 || s[0] != tokens || s[1] != 2 || s[2] != 1 || s[3] != n {
							t.Fatalf("shape %v, want [%d 2 1 %d]", s, tokens, n)
						}
						got, _ := y.Float32s()
						xs, _ := xf.Float32s()
						count := make([]int, experts)
						for _, e := range picks {
							count[e]++
						}
						for i := 0; i < 2*tokens; i++ {
							e := int(picks[i])
							want, _ := outs[i].Float32s()
							for r := 0; r < n; r++ {
								g, w := got[i*n+r], want[r]
								if count[e] <= 8 && xdt == Float32 {
									if math.Float32bits(g) != math.Float32bits(w) {
										t.Fatalf("token %d, expert %d, row %d: %g, BlockMatmul's %g", i/2, e, r, g, w)
									}
									continue
								}
								var mag float64
								for c := 0; c < k; c++ {
									mag += math.Abs(float64(xs[i/2*k+c]) * float64(ref[(e*n+r)*k+c]))
								}
								tol := 1e-5*mag + 1e-30
								if terms := tileTerms(count[e], 0, xdt, false, true); terms != 0 {
									// The expert's rows on the tile unit, the
									// row alone on x's grid.
									tol += tileBound(terms, k, false, mag)
								}
								if xdt != Float32 {
									tol = 8e-3*mag + 1e-30 // both outputs round to bfloat16
								}
								if d := math.Abs(float64(g) - float64(w)); d > tol {
									t.Fatalf("token %d, expert %d, row %d: %g, BlockMatmul's %g (off by %g, tolerance %g)", i/2, e, r, g, w, d, tol)
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestBlockErrors: what the block kernels refuse, by name.
func TestBlockErrors(t *testing.T) {
	q4k, _ := BlockFormatOfMode("gguf_q4_k")
	cases := []struct {
		name string
		run  func(g *Graph) *Array
		want string
	}{
		{"rows not whole blocks", func(g *Graph) *Array {
			return g.BlockMatmul(g.Zeros([]int{1, 256}, Float32), g.Zeros([]int{2, 143}, Uint8), q4k)
		}, "rows of 143 bytes are not whole blocks of 144"},
		{"x of another width", func(g *Graph) *Array {
			return g.BlockMatmul(g.Zeros([]int{1, 512}, Float32), g.Zeros([]int{2, 144}, Uint8), q4k)
		}, "input of last dimension 512 against rows of 256 values"},
		{"weight not uint8", func(g *Graph) *Array {
			return g.BlockMatmul(g.Zeros([]int{1, 256}, Float32), g.Zeros([]int{2, 36}, Uint32), q4k)
		}, "the weight is not a uint8 matrix of blocks"},
		{"experts' rows not whole blocks", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{2, 2, 143}, Uint8), GroupSize: 256, Bits: 4, Mode: "gguf_q4_k"}
			return g.GatherQMM(g.Zeros([]int{1, 1, 256}, Float32), q, nil, g.Zeros([]int{1, 1}, Uint32), true, false)
		}, "rows of 143 bytes are not whole blocks of 144"},
		{"experts against x of another width", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{2, 2, 144}, Uint8), GroupSize: 256, Bits: 4, Mode: "gguf_q4_k"}
			return g.GatherQMM(g.Zeros([]int{1, 1, 512}, Float32), q, nil, g.Zeros([]int{1, 1}, Uint32), true, false)
		}, "the last 512, against experts' rows of 256 values"},
		{"experts not a stack", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{2, 144}, Uint8), GroupSize: 256, Bits: 4, Mode: "gguf_q4_k"}
			return g.GatherQMM(g.Zeros([]int{1, 1, 256}, Float32), q, nil, g.Zeros([]int{1, 1}, Uint32), true, false)
		}, "the experts are not a uint8 stack [experts, rows, row bytes] of blocks"},
		{"experts without indices", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{2, 2, 144}, Uint8), GroupSize: 256, Bits: 4, Mode: "gguf_q4_k"}
			return g.GatherQMM(g.Zeros([]int{1, 1, 256}, Float32), q, nil, nil, true, false)
		}, "no expert indices"},
		{"experts by float indices", func(g *Graph) *Array {
			q := Quantized{Weight: g.Zeros([]int{2, 2, 144}, Uint8), GroupSize: 256, Bits: 4, Mode: "gguf_q4_k"}
			return g.GatherQMM(g.Zeros([]int{1, 1, 256}, Float32), q, nil, g.Zeros([]int{1, 1}, Float32), true, false)
		}, "the expert indices are not integers"},
		{"unknown code", func(g *Graph) *Array {
			return g.BlockDequantize(g.Zeros([]int{2, 144}, Uint8), BlockFormat{Name: "IQ2_XXS", Code: 16}, Float32)
		}, "block type code 16 is not one archgen's kernels read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewGraph(nil)
			defer g.Close()
			y := c.run(g)
			err := g.Eval(y)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// BenchmarkBlockMatmul: one row of x against a 1B model's MLP projection
// (8192 x 2048) in each of the types llama.cpp's files hold most, under
// each instruction set this machine runs; GB/s of W's bytes. The blocks'
// half-precision scales are set to 1/64 (random bytes there could be
// subnormal, which real files' scales are not).
func BenchmarkBlockMatmul(b *testing.B) {
	const n, k, chain = 8192, 2048, 4
	half := map[string][]int{"Q4_0": {0}, "Q8_0": {0}, "Q4_K": {0, 2}, "Q5_K": {0, 2}, "Q6_K": {208}}
	for _, f := range BlockFormats() {
		at, ok := half[f.Name]
		if !ok {
			continue
		}
		raw := make([]byte, n*f.RowBytes(k))
		for i := range raw {
			raw[i] = byte(i*7919 + i>>9)
		}
		for blk := 0; blk < len(raw); blk += f.Bytes {
			for _, o := range at {
				raw[blk+o], raw[blk+o+1] = 0x00, 0x24 // float16 1/64
			}
		}
		for _, isa := range ISAs(b) {
			b.Run(f.Name+"_"+isa.Name, func(b *testing.B) {
				defer isa.Set()()
				g := NewGraph(nil)
				defer g.Close()
				w := FromSlice(g, raw, n, f.RowBytes(k))
				x := g.Normal([]int{1, k}, Float32, 0, 1, g.RandomKey(1))
				if err := g.Eval(w, x); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					outs := make([]*Array, chain)
					for c := range outs {
						outs[c] = g.BlockMatmul(x, w, f)
					}
					if err := g.Eval(outs...); err != nil {
						b.Fatal(err)
					}
					for _, o := range outs {
						o.Free()
					}
				}
				b.ReportMetric(float64(len(raw))*float64(b.N*chain)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
