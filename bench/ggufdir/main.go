// Command ggufdir converts a GGUF checkpoint into a Hugging Face model
// directory (config.json, model.safetensors, tokenizer files) with gguf.Read
// and WriteDir, so that mlx-lm and archgen load the very same files.
//
//	go run ./bench/ggufdir -in model.gguf -out dir
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
)

func main() {
	in := flag.String("in", "", "the GGUF file")
	out := flag.String("out", "", "the model directory to write")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: ggufdir -in model.gguf -out dir")
		os.Exit(2)
	}
	m, err := gguf.Read(*in, nil, registry.Archs())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ggufdir:", err)
		os.Exit(1)
	}
	defer m.Free()
	if err := m.WriteDir(*out); err != nil {
		fmt.Fprintln(os.Stderr, "ggufdir:", err)
		os.Exit(1)
	}
}
