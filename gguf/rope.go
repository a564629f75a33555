package gguf

import (
	"fmt"
	"math"

	"github.com/archgen/archgen/runtime/mlx"
)

// ropeFreqs is llama.cpp's tensor of rope frequency factors: the
// converter writes Llama 3.1's scaling (rope_type llama3 in the config) as
// one divisor per rotated pair of dimensions, and nothing else of it.
const ropeFreqs = "rope_freqs.weight"

// llama.cpp's tensors of Phi-3's long-context rope (rope_type longrope):
// the per-pair factors of long and short contexts.
const (
	ropeLong  = "rope_factors_long.weight"
	ropeShort = "rope_factors_short.weight"
)

// longRope moves the factors of a longrope file into the config's
// rope_scaling ({"type": "longrope", "long_factor": ..., "short_factor":
// ...}), as the checkpoint's config holds them; the tensors are then not
// weights.
func longRope(arrays map[string]tensor, cfg map[string]any) error {
	long, hasLong := arrays[ropeLong]
	short, hasShort := arrays[ropeShort]
	if !hasLong && !hasShort {
		return nil
	}
	if !hasLong || !hasShort {
		return fmt.Errorf("tensors %s and %s come together (the file has one)", ropeLong, ropeShort)
	}
	rs := map[string]any{"type": "longrope"}
	for _, f := range []struct {
		name, key string
		t         tensor
	}{{ropeLong, "long_factor", long}, {ropeShort, "short_factor", short}} {
		if f.t.block != nil || f.t.scales != nil || f.t.array.Dtype() != mlx.Float32 || len(f.t.array.Shape()) != 1 {
			return fmt.Errorf("tensor %s: %s %v, want a float32 vector", f.name, f.t.array.Dtype(), f.t.array.Shape())
		}
		v, err := f.t.array.Float32s()
		if err != nil {
			return err
		}
		list := make([]any, len(v))
		for i, x := range v {
			list[i] = float64(x)
		}
		rs[f.key] = list
	}
	cfg["rope_scaling"] = rs
	for _, n := range []string{ropeLong, ropeShort} {
		arrays[n].free()
		delete(arrays, n)
	}
	return nil
}

// llama3Scaling recovers the config's llama3 rope_scaling from the factors
// f (one per pair of the dims rotated dimensions, rope base base), as
// Llama3RoPE makes them: 1 for wavelengths 2 pi base^(2i/dims) below
// L / high_freq_factor, factor above L / low_freq_factor, and between them
// 1 / ((1 - s) / factor + s) with s = (L / wavelength - low) / (high -
// low). factor is the largest; each blended dimension's s is then known,
// and s is linear in 1 / wavelength, so two of them fix L / (high - low)
// and low / (high - low), which is all the factors depend on: with L the
// file's original context length (8192, Llama 3.1's, when it has none),
// low and high follow. Every factor is recomputed from the result and must
// match; nil when every factor is 1 (no scaling).
func llama3Scaling(f []float32, base float64, dims int, origLen float64) (map[string]any, error) {
	if 2*len(f) != dims {
		return nil, fmt.Errorf("tensor %s: %d factors for %d rotated dimensions (one a pair)", ropeFreqs, len(f), dims)
	}
	wave := make([]float64, len(f))
	factor := 0.0
	for i, v := range f {
		wave[i] = 2 * math.Pi * math.Pow(base, float64(2*i)/float64(dims))
		factor = max(factor, float64(v))
	}
	if factor == 1 {
		return nil, nil
	}
	var blended []int
	for i, v := range f {
		if x := float64(v); x > 1+1e-6 && x < factor*(1-1e-6) {
			blended = append(blended, i)
		}
	}
	if len(blended) < 2 {
		return nil, fmt.Errorf("tensor %s: %d of its factors lie between 1 and the largest, %g; Llama 3's scaling needs two to be read back", ropeFreqs, len(blended), factor)
	}
	s := func(i int) float64 { return (1/float64(f[i]) - 1/factor) / (1 - 1/factor) }
	i, j := blended[0], blended[len(blended)-1]
	slope := (s(i) - s(j)) / (1/wave[i] - 1/wave[j]) // L / (high - low)
	offset := slope/wave[i] - s(i)                   // low / (high - low)
	low := offset * origLen / slope
	high := low + origLen/slope
	// Llama3RoPE's factor of dimension k under the recovered parameters
	at := func(k int, low, high float64) float64 {
		w := wave[k]
		switch {
		case w > origLen/low:
			return factor
		case w > origLen/high && w < origLen/low:
			sm := (origLen/w - low) / (high - low)
			return 1 / ((1-sm)/factor + sm)
		}
		return 1
	}
	fits := func(low, high float64) bool {
		for k, v := range f {
			if math.Abs(at(k, low, high)-float64(v)) > 1e-4*float64(v) {
				return false
			}
		}
		return true
	}
	// the parameters as a config writes them, where rounding keeps the fit
	if rl, rh := math.Round(low*1e4)/1e4, math.Round(high*1e4)/1e4; rl > 0 && rh > rl && fits(rl, rh) {
		low, high = rl, rh
	}
	if !(low > 0 && high > low) || !fits(low, high) {
		return nil, fmt.Errorf("tensor %s: its factors are not Llama 3's rope scaling (no low_freq_factor and high_freq_factor reproduce them)", ropeFreqs)
	}
	return map[string]any{
		"rope_type":                        "llama3",
		"factor":                           factor,
		"low_freq_factor":                  low,
		"high_freq_factor":                 high,
		"original_max_position_embeddings": origLen,
	}, nil
}
