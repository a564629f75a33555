// Command archrun runs a model directory of any supported architecture on
// token ids, for checking archgen against other implementations by hand.
//
//	archrun logits -model DIR -tokens 1,2,3 -out FILE.npy
//	archrun greedy -model DIR -tokens 1,2,3 [-n 16]
//
// logits runs the tokens through the model in one call and writes the
// logits of every position to FILE.npy: float32, shape [T, vocab], row t
// the logits after token t (numpy.load reads it).
//
// greedy generates n tokens (default 16) after the given ones, each the
// most likely next token (the first on a tie), and prints their ids
// space-separated on one line. It is the decode loop of archgen's generate
// package, which runs the prompt as mlx-lm's generate_step does, so its
// tokens are the ones mlx_lm.generate picks with its default greedy sampler.
//
// DIR is a model directory as mlx-lm saves it: config.json and the weights
// in safetensors (model.safetensors, or shards), floating-point or
// quantized. The architecture comes from config.json's model_type through
// archgen's registry; a model_type archgen does not run is refused with the
// registry's reason (an alias of an unsupported architecture names it).
// Errors go to stderr, with exit status 1; bad usage exits with status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/parity"
	"github.com/archgen/archgen/runtime/nn"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "archrun:", err)
		fmt.Fprintln(os.Stderr, "usage: archrun logits -model DIR -tokens 1,2,3 -out FILE.npy\n       archrun greedy -model DIR -tokens 1,2,3 [-n 16]")
		os.Exit(2)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "archrun:", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"no command (logits or greedy)"}
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cmd := args[0]
	fs := flag.NewFlagSet("archrun "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("model", "", "model directory: config.json and safetensors")
	tokenList := fs.String("tokens", "", "comma-separated token ids")
	out := fs.String("out", "", "logits: the .npy file to write")
	n := fs.Int("n", 16, "greedy: how many tokens to generate")
	switch cmd {
	case "logits", "greedy":
	default:
		return usageError{fmt.Sprintf("unknown command %q (logits or greedy)", cmd)}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if *dir == "" {
		return usageError{"-model DIR is required"}
	}
	tokens, err := parseTokens(*tokenList)
	if err != nil {
		return usageError{err.Error()}
	}
	if cmd == "logits" && *out == "" {
		return usageError{"logits needs -out FILE.npy"}
	}
	if cmd == "greedy" && *n <= 0 {
		return usageError{fmt.Sprintf("-n %d: need at least one token", *n)}
	}

	m, err := registry.Load(*dir, nn.Options{})
	if err != nil {
		return err
	}
	defer m.Free()
	vocab := m.Info().VocabSize
	for i, t := range tokens {
		if int(t) >= vocab {
			return fmt.Errorf("token %d (position %d) is outside the vocabulary of %d", t, i, vocab)
		}
	}

	if cmd == "logits" {
		logits, v, err := parity.Prefill(m, tokens)
		if err != nil {
			return err
		}
		return npy.WriteFile(*out, npy.Array{Shape: []int{len(tokens), v}, Data: logits})
	}
	var picks []string
	_, err = generate.Tokens(context.Background(), m, tokens, generate.Options{MaxTokens: *n, Vocab: vocab},
		func(t int32) error {
			picks = append(picks, strconv.Itoa(int(t)))
			return nil
		})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, strings.Join(picks, " "))
	return err
}

// parseTokens reads "1,2,3" (spaces allowed around the ids).
func parseTokens(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("-tokens is required: comma-separated token ids")
	}
	var out []int32
	for i, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("-tokens: item %d (%q) is not a token id", i+1, f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}
