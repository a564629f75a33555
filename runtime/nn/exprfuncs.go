package nn

import "math"

// RoundBfloat16 is x rounded to bfloat16's precision (8 significant bits,
// to nearest, ties to even), as MLX rounds a number it makes a bfloat16
// array of.
func RoundBfloat16(x float64) float64 {
	b := math.Float32bits(float32(x))
	if b&0x7f800000 == 0x7f800000 { // infinities and NaN stay
		return float64(math.Float32frombits(b))
	}
	b += 0x7fff + (b>>16)&1
	return float64(math.Float32frombits(b &^ 0xffff))
}

// CharAt is the character of s at index k, or "" where k is outside s.
func CharAt(s string, k int) string {
	if k < 0 || k >= len(s) {
		return ""
	}
	return s[k : k+1]
}

// At is list[k], or the zero value where k is outside the list (the
// descriptors' at(list, k): a list that may be absent, read at a layer).
func At[T any](list []T, k int) T {
	if k < 0 || k >= len(list) {
		var zero T
		return zero
	}
	return list[k]
}

// Round is x rounded to the nearest integer, ties to even, as Python's
// round(x) rounds.
func Round(x float64) int { return int(math.RoundToEven(x)) }

// If is a where c holds, else b: a descriptor's conditional.
func If[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}
