package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	archgen "github.com/archgen/archgen"
	"github.com/archgen/archgen/internal/npy"
)

func (a *app) embed(args []string) error {
	fs := a.flags("embed", "-model PATH [-pooling last|mean|cls] [-dimensions N] [-out FILE.npy] [TEXT ...]",
		"Writes one embedding per input: the model's final hidden states pooled over the input's tokens "+
			"(as /v1/embeddings gives them). The inputs are the arguments after the flags, or else the "+
			"lines of standard input (empty lines skipped). Each vector is printed as a JSON array, one "+
			"line per input in order, or written as float32 [inputs, dims] to -out in numpy's .npy format.")
	fs.rest = true
	var src source
	src.flags(fs.FlagSet, true)
	pooling := fs.String("pooling", "", "last (the last token's state), mean or cls (the first token's; default: as the model folder's sentence-transformers files say, else the model's own: last for a decoder, mean for BERT)")
	dims := fs.Int("dimensions", 0, "keep each vector's first N values (a Matryoshka truncation; 0: all)")
	noNorm := fs.Bool("no-normalize", false, "leave the pooled vectors as they are (default: scaled to unit length)")
	out := fs.String("out", "", "write the vectors to this .npy file instead of printing them")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return err
	}
	if *pooling != "" && !slices.Contains(archgen.Poolings, *pooling) {
		return usagef("-pooling %q: want last, mean or cls", *pooling)
	}
	if *dims < 0 {
		return usagef("-dimensions %d: want 0 (all) or more", *dims)
	}
	inputs := fs.Args()
	if len(inputs) == 0 {
		sc := bufio.NewScanner(a.stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			if line := sc.Text(); strings.TrimSpace(line) != "" {
				inputs = append(inputs, line)
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
	}
	if len(inputs) == 0 {
		return usagef("embed needs inputs: arguments after the flags, or lines on standard input")
	}
	ctx := context.Background()
	model, err := src.load(ctx, true)
	if err != nil {
		return err
	}
	defer model.Free()
	opts := archgen.EmbedOptions{Pooling: *pooling}
	if *pooling == "" {
		d, ok, err := model.EmbedDefaults()
		if err != nil {
			return err
		}
		if ok {
			opts = d
		}
	}
	opts.Dimensions = *dims
	if *noNorm {
		opts.NoNormalize = true
	}
	vecs, err := model.Embed(ctx, inputs, opts)
	var bad *archgen.EmbedInputError
	if errors.As(err, &bad) {
		return usagef("embed: input %d: %s", bad.Index+1, bad.Msg)
	}
	if err != nil {
		return err
	}
	if *out != "" {
		flat := make([]float32, 0, len(vecs)*len(vecs[0]))
		for _, v := range vecs {
			flat = append(flat, v...)
		}
		return npy.WriteFile(*out, npy.Array{Shape: []int{len(vecs), len(vecs[0])}, Data: flat})
	}
	w := bufio.NewWriter(a.stdout)
	enc := json.NewEncoder(w)
	for _, v := range vecs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return w.Flush()
}
