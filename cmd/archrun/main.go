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
//	archrun launch   [-n N | -hostfile F] [-timeout D] -- generate|logits|greedy ...
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
//	-memory-limit SIZE      refuse weights larger than SIZE (8GB, 512MiB,
//	                        bytes) and stop once MLX holds more; also sets
//	                        MLX's own limit, which the timing line reports
//
// convert writes a GGUF file as a Hugging Face model directory
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
// that archrun and mlx-lm both load.
//
// launch runs a command over a group of processes (tensor parallelism on
// MLX's ring backend): -n N processes on this machine over loopback, or,
// with -hostfile (mlx.launch's hostfile), the command each host runs is
// printed. A process whose environment has MLX_RANK and MLX_HOSTFILE set (as
// launch and mlx.launch start them) loads its share of the model and runs
// it with the others; only rank 0 prints. -shard-plan FILE gives the
// tensor-parallel plan (JSON: {"linears": {name: role}, "counts": [config
// key]}) in place of the architecture's. A peer that stops answering makes
// the others exit after -timeout (ARCHGEN_DIST_TIMEOUT, default 2m).
//
// While weights load from a terminal, a progress bar shows on standard
// error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/archgen/archgen/generated/registry"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "archrun:", err)
		fmt.Fprint(os.Stderr, usageText)
		os.Exit(2)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		if r := groupRank(); r >= 0 {
			fmt.Fprintf(os.Stderr, "archrun: rank %d: %v\n", r, err)
		} else {
			fmt.Fprintln(os.Stderr, "archrun:", err)
		}
		os.Exit(1)
	}
}

const usageText = `usage:
  archrun logits   -model DIR -tokens 1,2,3 -out FILE.npy
  archrun greedy   -model DIR -tokens 1,2,3 [-n 16]
  archrun generate (-model DIR | -gguf FILE) -prompt TEXT [flags]
  archrun convert  -gguf FILE -out DIR
  archrun launch   [-n N | -hostfile F] -- generate|logits|greedy ...
  archrun list
Run "go doc github.com/archgen/archgen/cmd/archrun" for the manual.
`

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// app is where a command writes.
type app struct {
	stdout, stderr io.Writer
}

// flags is a command's flag set, printing to stderr.
func (a *app) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("archrun "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	return fs
}

// parse parses args and refuses leftovers.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

// run runs one archrun command line (without the program name).
func run(args []string, stdout, stderr io.Writer) error {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if len(args) == 0 {
		return usagef("no command (logits, greedy, generate, convert, launch or list)")
	}
	a := &app{stdout: stdout, stderr: stderr}
	cmds := map[string]func([]string) error{
		"logits":   a.logits,
		"greedy":   a.greedy,
		"generate": a.generate,
		"convert":  a.convert,
		"list":     a.list,
		"launch":   a.launch,
	}
	cmd, ok := cmds[args[0]]
	if ok && launchable[args[0]] && inGroup() && groupRank() != 0 {
		// a rank of a group other than 0 runs its shard silently
		a.stdout, a.stderr = io.Discard, io.Discard
	}
	if !ok {
		return usagef("unknown command %q (logits, greedy, generate, convert, launch or list)", args[0])
	}
	return cmd(args[1:])
}

// parseTokens reads "1,2,3" (spaces allowed around the ids).
func parseTokens(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("-tokens is required: comma-separated token ids")
	}
	var out []int32
	for i, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || v < 0 {
			return nil, usagef("-tokens: item %d (%q) is not a token id", i+1, f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

func (a *app) list(args []string) error {
	if err := parse(a.flags("list"), args); err != nil {
		return err
	}
	for _, arch := range registry.Archs() {
		aliases := ""
		if len(arch.Aliases) > 0 {
			aliases = " (also " + strings.Join(arch.Aliases, ", ") + ")"
		}
		fmt.Fprintf(a.stdout, "%-12s %-8s %s%s\n", arch.Name, arch.Tier, arch.Doc, aliases)
	}
	return nil
}
