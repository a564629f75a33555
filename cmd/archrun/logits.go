package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/runtime/mlx"
)

func (a *app) logits(args []string) error {
	fs := a.flags("logits", "-model PATH -tokens 1,2,3 -out FILE.npy", "Writes the prefill logits of the tokens as float32, shape [T, vocab], in numpy's .npy format.")
	var src source
	src.flags(fs.FlagSet, true)
	tokens := fs.String("tokens", "", "prompt token ids, comma-separated")
	out := fs.String("out", "", "the .npy file to write")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return err
	}
	if *out == "" {
		return usagef("logits needs -out FILE.npy")
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return err
	}
	model, err := src.load(context.Background(), false)
	if err != nil {
		return err
	}
	defer model.Free()
	if err := model.CheckGenerative(); err != nil {
		return err
	}
	m := model.Net
	if err := checkTokens(ids, m.Info().VocabSize); err != nil {
		return err
	}
	g := mlx.NewGraph(nil)
	defer g.Close()
	caches := m.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	logits := m.Forward(g, mlx.FromSlice(g, ids, 1, len(ids)), caches)
	logits = g.AsType(g.Reshape(logits, len(ids), -1), mlx.Float32)
	if err := g.Eval(logits); err != nil {
		return err
	}
	v, err := logits.Float32s()
	if err != nil {
		return err
	}
	if src.group != nil && src.group.Rank() != 0 {
		return nil // rank 0 writes the file
	}
	return npy.WriteFile(*out, npy.Array{Shape: logits.Shape(), Data: v})
}

func (a *app) greedy(args []string) error {
	fs := a.flags("greedy", "-model PATH -tokens 1,2,3 [-n 16]", "Prints the n tokens greedy decoding with the KV cache produces, space-separated, on one line.")
	var src source
	src.flags(fs.FlagSet, true)
	tokens := fs.String("tokens", "", "prompt token ids, comma-separated")
	n := fs.Int("n", 16, "tokens to generate")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return err
	}
	ids, err := parseTokens(*tokens)
	if err != nil {
		return err
	}
	if *n < 1 {
		return usagef("-n %d: need at least one token", *n)
	}
	model, err := src.load(context.Background(), false)
	if err != nil {
		return err
	}
	defer model.Free()
	if err := model.CheckGenerative(); err != nil {
		return err
	}
	m := model.Net
	var out []string
	_, err = generate.Tokens(context.Background(), m, ids, generate.Options{MaxTokens: *n, Vocab: m.Info().VocabSize, MemoryLimit: src.limit},
		func(id int32) error {
			out = append(out, fmt.Sprint(id))
			return nil
		})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.stdout, strings.Join(out, " "))
	return err
}
