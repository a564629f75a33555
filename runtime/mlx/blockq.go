package mlx

/*
#include "shim.h"
*/
import "C"

import "fmt"

// BlockFormat is one of llama.cpp's block-quantized tensor types (the
// quantized types of GGUF files) as archgen's CPU kernels read it: a row
// is a run of blocks of Values values in Bytes bytes each. A Quantized
// whose Mode is a block format's Mode holds such rows as a uint8 Weight
// [rows, bytes per row], with no scales or biases (they are inside the
// blocks); its GroupSize is the block's values and Bits the type's
// nominal width.
type BlockFormat struct {
	Name   string // llama.cpp's name: "Q4_K"
	Mode   string // the Quantized mode: "gguf_q4_k"
	Code   int    // llama.cpp's type code
	Values int
	Bytes  int
	Bits   int
}

// blockFormats are the types the kernels read (blockq.h).
var blockFormats = []BlockFormat{
	{"Q4_0", "gguf_q4_0", 2, 32, 18, 4},
	{"Q4_1", "gguf_q4_1", 3, 32, 20, 4},
	{"Q5_0", "gguf_q5_0", 6, 32, 22, 5},
	{"Q5_1", "gguf_q5_1", 7, 32, 24, 5},
	{"Q8_0", "gguf_q8_0", 8, 32, 34, 8},
	{"Q2_K", "gguf_q2_k", 10, 256, 84, 2},
	{"Q3_K", "gguf_q3_k", 11, 256, 110, 3},
	{"Q4_K", "gguf_q4_k", 12, 256, 144, 4},
	{"Q5_K", "gguf_q5_k", 13, 256, 176, 5},
	{"Q6_K", "gguf_q6_k", 14, 256, 210, 6},
	{"IQ4_NL", "gguf_iq4_nl", 20, 32, 18, 4},
	{"IQ4_XS", "gguf_iq4_xs", 23, 256, 136, 4},
	{"MXFP4", "gguf_mxfp4", 39, 32, 17, 4},
}

// BlockFormats lists the block-quantized types the kernels read.
func BlockFormats() []BlockFormat { return append([]BlockFormat(nil), blockFormats...) }

// BlockFormatOfMode is the block format whose Mode is mode.
func BlockFormatOfMode(mode string) (BlockFormat, bool) {
	for _, f := range blockFormats {
		if f.Mode == mode {
			return f, true
		}
	}
	return BlockFormat{}, false
}

// BlockFormatOfCode is the block format of llama.cpp's type code.
func BlockFormatOfCode(code int) (BlockFormat, bool) {
	for _, f := range blockFormats {
		if f.Code == code {
			return f, true
		}
	}
	return BlockFormat{}, false
}

// IsBlockMode says mode is a block format's.
func IsBlockMode(mode string) bool {
	_, ok := BlockFormatOfMode(mode)
	return ok
}

// RowBytes is the bytes of a row of k values (k a multiple of Values).
func (f BlockFormat) RowBytes(k int) int { return k / f.Values * f.Bytes }

// BlockMatmul is x @ W^T for W [N, row bytes] of uint8 holding blocks of
// format f: float32 arithmetic on the decoded values, in x's dtype.
func (g *Graph) BlockMatmul(x, w *Array, f BlockFormat) *Array {
	if !g.ok("block_matmul", x, w) {
		return g.bad
	}
	return g.done("block_matmul", C.mlxg_block_matmul(g.res0(), x.c, w.c, C.int(f.Code), g.s.c, g.errp()))
}

// BlockDequantize decodes W [..., row bytes] of blocks of format f into
// [..., values] of dtype (float32 when dtype is not a float dtype). In
// float32 each value is llama.cpp's reference dequantization, to the bit.
func (g *Graph) BlockDequantize(w *Array, f BlockFormat, dtype Dtype) *Array {
	if !g.ok("block_dequantize", w) {
		return g.bad
	}
	if !dtype.IsFloat() {
		dtype = Float32
	}
	return g.done("block_dequantize", C.mlxg_block_dequantize(g.res0(), w.c, C.int(f.Code), C.int(dtype), g.s.c, g.errp()))
}

func (f BlockFormat) String() string {
	return fmt.Sprintf("%s (%d values in %d bytes)", f.Name, f.Values, f.Bytes)
}
