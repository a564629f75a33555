package mlx

import (
	"fmt"
	"testing"
)

// TestQuantizedMatmulRowsAlone: the kernel gives each row of x the same
// result whatever rows it is multiplied with, bit for bit, for the row
// counts of small decoding batches (up to 8 rows: the packed-value path),
// with float32 and float16 scales. A batch of sequences then computes for each what it
// computes alone.
func TestQuantizedMatmulRowsAlone(t *testing.T) {
	if !NativeQuantizedMatmul() {
		t.Skip("the native kernel is off here (no AVX2, FMA and F16C, or ARCHGEN_MLX_NATIVE_QMM=0)")
	}
	const n, k = 70, 256
	for _, bits := range []int{4, 8} {
		for _, sdt := range []Dtype{Float32, Float16} {
			for _, m := range []int{2, 3, 4, 5, 7, 8} {
				t.Run(fmt.Sprintf("b%d_s%s_m%d", bits, sdt, m), func(t *testing.T) {
					g := NewGraph(nil)
					defer g.Close()
					k1, k2 := g.RandomSplit(g.RandomKey(uint64(bits*100 + m)))
					q := g.Quantize(g.Normal([]int{n, k}, Float32, 0, 0.2, k1), 32, bits)
					q.Scales = g.AsType(q.Scales, sdt)
					q.Biases = g.AsType(q.Biases, sdt)
					x := g.Normal([]int{m, k}, Float32, 0, 1, k2)
					if err := g.Eval(x, q.Weight, q.Scales, q.Biases); err != nil {
						t.Fatal(err)
					}
					all := g.QuantizedMatmul(x, q, true)
					if err := g.Eval(all); err != nil {
						t.Fatal(err)
					}
					got, err := all.Float32s()
					if err != nil {
						t.Fatal(err)
					}
					for i := 0; i < m; i++ {
						row := g.Contiguous(g.Slice(x, []int{i, 0}, []int{i + 1, k}))
						one := g.QuantizedMatmul(row, q, true)
						if err := g.Eval(one); err != nil {
							t.Fatal(err)
						}
						want, err := one.Float32s()
						if err != nil {
							t.Fatal(err)
						}
						for c := range want {
							if got[i*n+c] != want[c] {
								t.Fatalf("row %d, col %d: %g among %d rows, %g alone", i, c, got[i*n+c], m, want[c])
							}
						}
					}
				})
			}
		}
	}
}
