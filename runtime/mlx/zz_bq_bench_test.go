package mlx

import "testing"

func benchBlock(b *testing.B, mode string, n, k int) {
	f, _ := BlockFormatOfMode(mode)
	g := NewGraph(nil)
	defer g.Close()
	raw := make([]byte, n*f.RowBytes(k))
	for i := range raw { raw[i] = byte(i * 7) }
	for r := 0; r < n*k/f.Values; r++ { off := r*f.Bytes; if mode != "gguf_q2_k" && mode != "gguf_q3_k" && mode != "gguf_q6_k" { raw[off] = 0; raw[off+1] = 0x20 } }
	w := FromSlice(g, raw, n, f.RowBytes(k))
	x := g.Normal([]int{1, k}, Float32, 0, 1, g.RandomKey(1))
	g.Eval(w, x)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		y := g.BlockMatmul(x, w, f)
		g.Eval(y)
	}
	b.SetBytes(int64(n * k))
}

func benchAffine(b *testing.B, n, k int) {
	g := NewGraph(nil)
	defer g.Close()
	wf := g.AsType(g.Normal([]int{n, k}, Float32, 0, 1, g.RandomKey(2)), Float16)
	q := g.Quantize(wf, 32, 4)
	x := g.Normal([]int{1, k}, Float32, 0, 1, g.RandomKey(1))
	g.Eval(q.Weight, q.Scales, q.Biases, x)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		y := g.QuantizedMatmul(x, q, true)
		g.Eval(y)
	}
	b.SetBytes(int64(n * k))
}

func BenchmarkBQ41(b *testing.B)  { benchBlock(b, "gguf_q4_1", 8192, 2048) }
func BenchmarkBQ4K(b *testing.B)  { benchBlock(b, "gguf_q4_k", 8192, 2048) }
func BenchmarkBQ6K(b *testing.B)  { benchBlock(b, "gguf_q6_k", 8192, 2048) }
func BenchmarkBQ80(b *testing.B)  { benchBlock(b, "gguf_q8_0", 8192, 2048) }
func BenchmarkAff4(b *testing.B)  { benchAffine(b, 8192, 2048) }
