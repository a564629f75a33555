package mlx

/*
#include "shim.h"
*/
import "C"

// ActiveMemory is the number of bytes MLX's arrays hold now.
func ActiveMemory() uint64 { return uint64(C.mlxg_get_active_memory()) }

// PeakMemory is the most ActiveMemory has been since the start or the last
// ResetPeakMemory.
func PeakMemory() uint64 { return uint64(C.mlxg_get_peak_memory()) }

// ResetPeakMemory starts PeakMemory over from the current figure.
func ResetPeakMemory() { C.mlxg_reset_peak_memory() }

// CacheRowsCopied is the number of bytes cache writes (CacheRows,
// WritePositions) have copied whole since the start: arrays that something
// else still held, so that the write could not take their buffers and
// write in place. A prompt cache's entry reused by a request is copied so
// once; a batch's arrays in a steady run never are.
func CacheRowsCopied() int64 { return int64(C.mlxg_cache_rows_copied()) }

// CacheMemory is the number of bytes MLX keeps freed for reuse.
func CacheMemory() uint64 { return uint64(C.mlxg_get_cache_memory()) }

// SetMemoryLimit sets MLX's memory limit (MemoryLimit reports it) and
// returns the previous one. On the CPU build an allocation past it still
// succeeds, so a hard bound is the caller's: generate.Options.MemoryLimit
// and nn.Options.MemoryLimit check against their own.
func SetMemoryLimit(bytes uint64) uint64 { return uint64(C.mlxg_set_memory_limit(C.size_t(bytes))) }

// MemoryLimit is the current memory limit.
func MemoryLimit() uint64 { return uint64(C.mlxg_get_memory_limit()) }

// SetCacheLimit bounds CacheMemory and returns the previous bound.
func SetCacheLimit(bytes uint64) uint64 { return uint64(C.mlxg_set_cache_limit(C.size_t(bytes))) }

// ClearCache returns the memory MLX keeps for reuse, and (with glibc) the
// C heap's free memory, to the system.
func ClearCache() { C.mlxg_clear_cache() }

// SetHeapMmapThreshold has the C heap (glibc's) give each allocation of
// at least bytes its own mapping, returned to the system when freed, and
// stop raising that threshold by itself (it does after each large free,
// up to 32 MiB, after which freed buffers of up to that size stay in its
// arenas). A server whose batches copy their caches as rows come and go
// frees such buffers all the time: with the default its resident memory
// grew to 5 GiB where MLX held 1.2 GiB, with 1 MiB to 1.7 GiB. It reports
// whether the C library took it (false without glibc).
func SetHeapMmapThreshold(bytes int) bool { return C.mlxg_heap_mmap_threshold(C.size_t(bytes)) != 0 }

// TrimHeap returns the C heap's free memory to the system (with glibc,
// which otherwise keeps what was freed in its arenas); MLX's own cache of
// buffers stays.
func TrimHeap() { C.mlxg_trim_heap() }

// NativeQuantizedMatmul reports whether QuantizedMatmul runs this package's
// own CPU kernel where it applies (float32 computation, affine 4 or 8 bits,
// groups of 32, 64 or 128) rather than libmlx's: true on x86-64 CPUs with
// AVX2, FMA and F16C, unless the environment sets ARCHGEN_MLX_NATIVE_QMM=0.
func NativeQuantizedMatmul() bool { return C.mlxg_native_qmm() != 0 }

// NativeGatherQMM reports whether GatherQMM runs this package's own CPU
// kernel where it applies (transposed experts, affine at 2 to 8 bits in
// groups of 32, 64 or 128, or mxfp4) rather than libmlx's: true on x86-64
// CPUs with AVX2, FMA, F16C and BMI2, unless the environment sets
// ARCHGEN_MLX_NATIVE_QMM=0. Where mlx computes in bfloat16 or float16 (a
// half-precision input with scales of its dtype, or mxfp4 with a
// half-precision input), NativeQuantizedMatmulHalf's mode applies as for
// QuantizedMatmul: by default the kernel does libmlx's arithmetic in that
// dtype and equals its results bit for bit.
func NativeGatherQMM() bool { return C.mlxg_native_gather_qmm() != 0 }

// setNativeGatherQMM turns the kernel of NativeGatherQMM on or off (on only
// where the CPU allows) and returns the previous setting; the tests and
// benchmarks use it to run both paths in one process.
func setNativeGatherQMM(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_gather_qmm(C.int(v)) != 0
}

// The ways a quantized product with a float16 or bfloat16 input and scales
// of the same dtype can run (libmlx computes it in that dtype, rounding
// after every multiply and add).
const (
	// HalfQMMLibmlx is libmlx's own scalar kernel.
	HalfQMMLibmlx = 0
	// HalfQMMFloat32 is the native float32 kernels: float32 sums, the
	// result rounded once; closer to the exact product than libmlx, but
	// not to mlx-lm's references for the quantized parity levels, which
	// carry libmlx's rounding (see parity/refgen/qdrift.py).
	HalfQMMFloat32 = 1
	// HalfQMMExact is the native kernel in libmlx's rounding, equal to
	// libmlx's results bit for bit, eight outputs at a time.
	HalfQMMExact = 2
)

// NativeQuantizedMatmulHalf says which of HalfQMMLibmlx, HalfQMMFloat32
// and HalfQMMExact runs: HalfQMMExact where NativeQuantizedMatmul is on,
// unless the environment sets ARCHGEN_MLX_NATIVE_QMM_HALF=f32 or =0.
func NativeQuantizedMatmulHalf() int { return int(C.mlxg_native_qmm_half()) }

// setNativeQuantizedMatmulHalf sets the mode of NativeQuantizedMatmulHalf
// and returns the previous one; the tests use it to compare the paths in
// one process.
func setNativeQuantizedMatmulHalf(mode int) int {
	return int(C.mlxg_set_native_qmm_half(C.int(mode)))
}

// NativeQMVInt8 reports whether the native kernel's 4-bit products for
// one or two rows of x (decode's matrix-vector products) run on 8-bit
// integers: x quantized per block of 32 values to int8 (step: the block's
// largest magnitude over 127), each block's products summed exactly in
// integers, as llama.cpp does. Off unless ARCHGEN_MLX_NATIVE_QMV_INT8=1 or
// SetNativeQMVInt8 turns it on.
func NativeQMVInt8() bool { return C.mlxg_native_qmv_int8() != 0 }

// SetNativeQMVInt8 turns NativeQMVInt8 on or off for the whole process and
// returns the previous setting.
func SetNativeQMVInt8(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_qmv_int8(C.int(v)) != 0
}

// NativeQMV16 reports whether the native kernel's dense products of a
// float32 x by a 4- or 8-bit affine-quantized W round x to 16 bits per
// group of W: decode's rows of x then run on integers (qmv16.h), more rows
// on the rounded x, so that a row's product does not depend on the rows
// beside it. On unless ARCHGEN_MLX_NATIVE_QMV16=0 or SetNativeQMV16 turns
// it off (then every such product multiplies x as it is on the float32
// kernels).
func NativeQMV16() bool { return C.mlxg_native_qmv16() != 0 }

// SetNativeQMV16 turns NativeQMV16 on or off for the whole process and
// returns the previous setting.
func SetNativeQMV16(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_qmv16(C.int(v)) != 0
}

// NativeQMM16 reports whether the native kernel's products of more than 8
// rows of a float32 x (a prompt, a large batch) by a 4- or 8-bit affine or
// a block-quantized W, and a mixture's experts of more than 8 rows, run on
// 16-bit integer panels: x on the same 16-bit grid per group as decode's
// products, W's values packed into panels, sums exact in 32-bit integers
// per group. On where the kernel runs AVX-512 with VNNI, unless
// ARCHGEN_MLX_NATIVE_QMM16=0 or SetNativeQMM16 turns it off (then the
// float32 panels multiply the rounded x). The tile unit, where it runs,
// takes those products first.
func NativeQMM16() bool { return C.mlxg_native_qmm16() != 0 }

// SetNativeQMM16 turns the integer panels on or off for the whole process
// and returns the previous setting.
func SetNativeQMM16(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_qmm16(C.int(v)) != 0
}

// The instruction sets of NativeISA.
const (
	ISAAVX2   = 1
	ISAAVX512 = 2
)

// NativeISA reports which instructions the native quantized kernel runs
// (0 where NativeQuantizedMatmul is off): ISAAVX512 where the CPU and the
// operating system run AVX-512 with VNNI; ISAAVX2 otherwise, or where
// ARCHGEN_MLX_ISA=avx2 asks for it. Under both, decode's products (up to 8
// rows of a float32 x against 4- or 8-bit W, where NativeQMV16 is on) quantize x to 16
// bits per group of W and sum the group's products in integers.
func NativeISA() int { return int(C.mlxg_native_isa()) }

// SetNativeISA sets NativeISA for the whole process, at most to what this
// machine runs, and returns the previous level; the tests use it to run
// both paths.
func SetNativeISA(level int) int { return int(C.mlxg_set_native_isa(C.int(level))) }

// The settings of NativeTiles.
const (
	TilesOff  = 0
	TilesAuto = 4
)

// NativeTiles reports how products of many rows of x (a prompt's, or a
// large batch's) run on the CPU's tile unit, Intel AMX with bfloat16
// products summed in float32, where the CPU and the operating system run
// it and the product's output is float32: TilesOff where they do not (or
// ARCHGEN_MLX_TILES=0 or ARCHGEN_MLX_ISA=avx2), 1 to 3 for x and W carried
// as that many bfloat16 parts (1: both rounded to bfloat16; 2: x as a
// bfloat16 pair, 16 bits of its mantissa; 3: both as pairs), TilesAuto (the
// default): x as a pair and W as itself (2 for a bfloat16 W, 3 for float16
// and quantized ones), a float32 W on the float32 kernels.
func NativeTiles() int { return int(C.mlxg_native_tiles()) }

// SetNativeTiles sets NativeTiles' mode for the whole process (TilesOff
// where the CPU has no tile unit) and returns the previous one.
func SetNativeTiles(mode int) int { return int(C.mlxg_set_native_tiles(C.int(mode))) }

// NativeFastOps reports whether RMSNorm, LayerNorm, RoPE and SDPA run this
// package's own CPU kernels where they apply (float32, float16 and bfloat16
// on the CPU) rather than libmlx's fallbacks composed of small ops: true on
// x86-64 CPUs with AVX2, FMA and F16C, unless the environment sets
// ARCHGEN_MLX_NATIVE_FAST=0.
func NativeFastOps() bool { return C.mlxg_native_fast() != 0 }

// setNativeFastOps turns the kernels of NativeFastOps on or off (on only
// where the CPU allows) and returns the previous setting; the tests use it
// to compare both paths in one process.
func setNativeFastOps(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_fast(C.int(v)) != 0
}

// setNativeRecurrent turns the recurrent mixers' kernels (GatedDelta's,
// Conv1D's depthwise form) on or off and returns the previous setting; the
// tests use it to compare both paths in one process. Lightning has no
// composed path behind it: off, its kernel runs on the baseline vectors.
func setNativeRecurrent(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	return C.mlxg_set_native_recurrent(C.int(v)) != 0
}
