// Command archrun runs any architecture archgen generated on a model on
// disk. It is how the parity matrix runs checkpoints, and how a user checks a
// new checkpoint by hand or talks to one.
//
// Usage:
//
//	archrun logits   -model DIR -tokens 1,2,3 -out FILE.npy
//	archrun greedy   -model DIR -tokens 1,2,3 [-n 16]
//	archrun generate (-model DIR | -gguf FILE) -prompt TEXT [flags]
//	archrun convert  -gguf FILE -out DIR
//	archrun list
//
// A model directory is a config.json and its safetensors: model.safetensors,
// or shards listed by model.safetensors.index.json; float32, float16 or
// bfloat16 weights, or mlx-community quantized ones. A -gguf file is a
// llama.cpp checkpoint (llama, qwen2 or qwen3 architecture) read through
// MLX's GGUF loader. A model_type archgen does not support is refused with
// the reason, naming the real architecture behind an alias.
//
// logits writes the prefill logits of the tokens as float32, shape
// [T, vocab], in numpy's .npy format. greedy prints the n tokens greedy
// decoding with the KV cache produces, space-separated, on one line.
//
// generate prints text as it is generated, then a line with the prompt's
// and the generation's tokens per second and the peak memory. Its flags
// follow mlx_lm.generate's:
//
//	-prompt TEXT            the prompt ("-" reads it from standard input)
//	-system-prompt TEXT     a system message before it
//	-chat                   require the tokenizer's chat template (it is used
//	                        whenever the tokenizer has one)
//	-ignore-chat-template   use the prompt as it is
//	-max-tokens N           at most N tokens (default 256)
//	-temp T                 temperature; 0, the default, is greedy
//	-top-p P, -min-p P, -min-tokens-to-keep N, -top-k K
//	-repetition-penalty R, -repetition-context-size N
//	-seed S                 the random seed (default 0)
//	-stop TEXT              stop before TEXT (repeatable)
//	-extra-eos-token TOKEN  another token that ends generation (repeatable)
//	-max-kv-size N          keep at most N positions per layer (rotating)
//	-kv-bits B, -kv-group-size G, -quantized-kv-start N
//	                        quantize the KV cache from position N on
//	-dtype D                compute dtype (float32, float16, bfloat16);
//	                        default: the checkpoint's
//	-verbose=false          print only the text
//
// convert writes a GGUF file as a Hugging Face model directory
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
// that archrun and mlx-lm both load.
//
// While weights load from a terminal, a progress bar shows on standard
// error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/archgen/archgen/generated/registry"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"logits":   cmdLogits,
		"greedy":   cmdGreedy,
		"generate": cmdGenerate,
		"convert":  cmdConvert,
		"list":     cmdList,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "archrun: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "archrun:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  archrun logits   -model DIR -tokens 1,2,3 -out FILE.npy
  archrun greedy   -model DIR -tokens 1,2,3 [-n 16]
  archrun generate (-model DIR | -gguf FILE) -prompt TEXT [flags]
  archrun convert  -gguf FILE -out DIR
  archrun list
Run "go doc github.com/archgen/archgen/cmd/archrun" for the manual.`)
}

// parseTokens reads "1,2,3".
func parseTokens(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("-tokens: no tokens given")
	}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("-tokens: %q is not a token id", f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

func cmdList(args []string) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, a := range registry.Archs() {
		aliases := ""
		if len(a.Aliases) > 0 {
			aliases = " (also " + strings.Join(a.Aliases, ", ") + ")"
		}
		fmt.Printf("%-12s %-8s %s%s\n", a.Name, a.Tier, a.Doc, aliases)
	}
	return nil
}
