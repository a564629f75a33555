package kv

import (
	"fmt"

	"github.com/archgen/archgen/runtime/mlx"
)

// Options choose the caches a model makes (a generated model's NewCaches
// takes them). The zero value is mlx-lm's default: a plain growing cache on
// every full-attention layer and a window cache on every sliding one, all
// dense.
type Options struct {
	// MaxKVSize > 0 bounds the full-attention layers too: each gets a
	// rotating cache of that many positions that pins the first
	// MaxKVKeep (mlx-lm's max_kv_size). Sliding layers keep their window.
	MaxKVSize int
	// KVBits > 0 quantizes every cache once its offset reaches
	// QuantizedKVStart (mlx-lm's kv_bits and quantized_kv_start; its
	// command line starts at 5000, here 0), after the model call that got
	// it there, in groups of KVGroupSize values along the head dim (64
	// when 0).
	KVBits, KVGroupSize, QuantizedKVStart int
	// Dtype is what the caches hold keys and values in (float32, bfloat16
	// or float16; quantized, their scales and biases): 0 keeps them as the
	// forward pass computes them. A model's NewCaches sets it to the
	// checkpoint's half-precision dtype when it computes in float32, unless
	// it routes to experts (see nn.Params.CacheDtype): half the bytes to
	// hold and to read per step, at the precision the checkpoint's own
	// arithmetic would give them.
	Dtype mlx.Dtype
}

// MaxKVKeep is the number of first positions a cache bounded by MaxKVSize
// never drops, as in mlx-lm.
const MaxKVKeep = 4

// Check reports options that no cache can follow.
func (o Options) Check() error {
	if o.MaxKVSize < 0 || (o.MaxKVSize > 0 && o.MaxKVSize <= MaxKVKeep) {
		return fmt.Errorf("kv: max KV size %d must be more than the %d positions it keeps", o.MaxKVSize, MaxKVKeep)
	}
	if o.QuantizedKVStart < 0 {
		return fmt.Errorf("kv: quantized KV start %d is negative", o.QuantizedKVStart)
	}
	if o.KVBits < 0 {
		return fmt.Errorf("kv: KV bits %d is negative", o.KVBits)
	}
	if o.Dtype != 0 && !cacheDtype(o.Dtype) {
		return fmt.Errorf("kv: a cache holds float32, bfloat16 or float16, not %s", o.Dtype)
	}
	if o.KVBits == 0 && o.KVGroupSize != 0 {
		return fmt.Errorf("kv: KV group size %d without KV bits", o.KVGroupSize)
	}
	return o.quantization().Check()
}

// quantization is when mlx-lm's generate_step switches a cache: it checks
// after each model call, so the first call of an empty cache runs dense
// even from start 0, as a switch at offset 1 would have it.
func (o Options) quantization() Quantization {
	return Quantization{Bits: o.KVBits, GroupSize: o.KVGroupSize, Start: max(o.QuantizedKVStart, 1)}
}

// Full is the cache of a full-attention layer.
func (o Options) Full() Cache {
	if o.MaxKVSize > 0 {
		return NewRotating(o.MaxKVSize, MaxKVKeep).Quantize(o.quantization()).Hold(o.Dtype)
	}
	return NewPlain().Quantize(o.quantization()).Hold(o.Dtype)
}

// Sliding is the cache of a layer that attends over a window of that many
// positions.
func (o Options) Sliding(window int) Cache {
	return NewRotating(window, 0).Quantize(o.quantization()).Hold(o.Dtype)
}

// cacheDtype reports whether caches hold keys and values of dtype dt.
func cacheDtype(dt mlx.Dtype) bool {
	return dt == mlx.Float32 || dt == mlx.BFloat16 || dt == mlx.Float16
}
