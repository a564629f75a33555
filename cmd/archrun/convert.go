package main

import (
	"fmt"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
)

func (a *app) convert(args []string) error {
	fs := a.flags("convert", "-gguf FILE -out DIR", "Writes a GGUF file as a Hugging Face model directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json) that archrun and mlx-lm both load. Q4_0, Q4_1 and Q8_0 tensors stay quantized (mlx's affine form); mlx has no form for the other block types (the K-quants, IQ4), which are written as the float32 values they decode to: run the .gguf itself to keep them quantized.")
	in := fs.String("gguf", "", "the GGUF file to convert")
	out := fs.String("out", "", "the model directory to write")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		return usagef("convert needs -gguf FILE and -out DIR")
	}
	m, err := gguf.Read(*in, nil, registry.Archs())
	if err != nil {
		return err
	}
	defer m.Free()
	if err := m.WriteDir(*out); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "wrote %s (%s, %d tensors)\n", *out, m.Arch, len(m.Tensors))
	return nil
}
