package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/archgen/archgen/gguf"
)

func cmdConvert(args []string) error {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	in := fs.String("gguf", "", "the GGUF file to convert")
	out := fs.String("out", "", "the model directory to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		return errors.New("-gguf and -out are required")
	}
	m, err := gguf.Read(*in, nil)
	if err != nil {
		return err
	}
	defer m.Free()
	if err := m.WriteDir(*out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%s, %d tensors)\n", *out, m.Arch, len(m.Tensors))
	return nil
}
