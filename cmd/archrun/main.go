// Command archrun runs any architecture archgen generated on a model on
// disk or on the Hugging Face Hub: to talk with it, to generate from a
// prompt, and to check a checkpoint against mlx-lm (the parity matrix runs
// it).
//
// Usage:
//
//	archrun chat     -model PATH [flags]
//	archrun generate -model PATH (-prompt TEXT | -f FILE) [flags]
//	archrun embed    -model PATH [-pooling last|mean] [-dimensions N] [-no-normalize] [-out FILE.npy] [TEXT ...]
//	archrun convert  -gguf FILE -out DIR
//	archrun logits   -model PATH -tokens 1,2,3 -out FILE.npy
//	archrun greedy   -model PATH -tokens 1,2,3 [-n 16]
//	archrun serve    (-model PATH | -gguf FILE | -hf ORG/NAME) [-host H] [-port P] [-max-batch N] [-prompt-cache-bytes SIZE]
//	archrun launch   [-n N | -hostfile F] [-timeout D] -- generate|logits|greedy ...
//	archrun pull     ORG/NAME[@REVISION] [-include GLOB,...] [-exclude GLOB,...] [-endpoint URL]
//	archrun list
//	archrun help [COMMAND]
//
// -h, -help, --help and help print the help of archrun or of a command
// (archrun generate -h, archrun help generate), to standard output.
//
// # Models
//
// -model (or -m) takes what archgen.Load takes: a model directory (a
// config.json and its safetensors, model.safetensors or shards listed by
// model.safetensors.index.json, float or mlx-community quantized, with
// tokenizer.json and tokenizer_config.json); a llama.cpp GGUF file (llama,
// qwen2 or qwen3 architecture; -gguf FILE says the same); or a Hugging
// Face repo id (ORG/NAME, or ORG/NAME@REVISION for a branch, a tag or a
// commit) or cache folder (models--ORG--NAME), found in the Hugging Face
// cache ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub) at the
// snapshot refs/main (refs/REVISION) names. A repo id the cache lacks is
// downloaded into it from the Hub first, as pull does, with a progress bar
// on a terminal; -offline (or HF_HUB_OFFLINE=1) keeps archrun to the
// cache. A repo the cache holds is read from it without the network. A
// path that is none of these is refused with what to pass
// instead: a directory without config.json is told what a model directory
// holds; a cache folder above the models--ORG--NAME folders is told the
// repo ids it holds; a directory without tokenizer.json is refused before
// its weights are read. A model_type archgen does not support is refused
// with the reason, naming the real architecture behind an alias.
//
// # chat
//
// chat is a REPL: each line read from standard input is a user message,
// answered with the model's chat template, the text streaming as it comes.
// The KV cache is kept across turns, so each turn runs only the tokens the
// cache does not hold yet; after each answer a line on standard error gives
// the prompt tokens processed and those the cache held, with the speeds:
//
//	[prompt: 16 tokens processed, 49 cached, 24.9 tok/s | generation: 11 tokens, 7.5 tok/s | stop]
//
// Lines that start with a slash are commands:
//
//	/system TEXT  set the system prompt (the cache is reused up to where
//	              the conversation changes)
//	/reset        forget the conversation and empty the cache
//	/save FILE    save the cache and the conversation, in mlx-lm's
//	              prompt-cache format (safetensors)
//	/load FILE    load what /save wrote
//	/help, /quit  (end of input quits too)
//
// chat takes generate's sampling, cache and template flags.
//
// # embed
//
// embed writes one embedding per input, as /v1/embeddings and
// archgen.Model.Embed give them: the final hidden states pooled by the last
// token or the mean (-pooling; by default as a model folder's
// sentence-transformers files say, else the last token), cut to
// -dimensions and normalized to unit length unless -no-normalize. The
// inputs are the arguments after the flags, or else the non-empty lines of
// standard input; each vector is printed as a JSON array on a line of its
// own, in input order, or all are written to -out as a float32 .npy array
// [inputs, dimensions]. An input with no tokens or longer than the model's
// context is refused, naming its place (from 1).
//
// # generate
//
// generate prints text as it is generated, then the prompt's and the
// generation's tokens per second and the peak memory. Its flags follow
// mlx_lm.generate's, with llama-cli's short forms:
//
//	-prompt, -p TEXT        the prompt ("-" reads it from standard input)
//	-f FILE                 read the prompt from FILE
//	-system-prompt TEXT     a system message before it
//	-chat                   require the tokenizer's chat template (it is used
//	                        whenever the tokenizer has one)
//	-ignore-chat-template   use the prompt as it is
//	-chat-template-config JSON
//	                        further template variables, such as
//	                        {"enable_thinking": false}
//	-prompt-cache-file F    continue a prompt cache (mlx_lm.cache_prompt's,
//	                        or chat's /save): with the chat template, the
//	                        prompt is the part of the rendered conversation
//	                        from the user's text on, as mlx_lm.generate
//	                        takes it; -model defaults to the cache's model
//	-max-tokens, -n N       at most N tokens (default 256)
//	-temp T                 temperature; 0, the default, is greedy
//	-top-p P, -min-p P, -min-tokens-to-keep N, -top-k K
//	-repetition-penalty R, -repetition-context-size N
//	-seed S                 the random seed; without it each run draws a
//	                        seed of its own, so that sampling differs from
//	                        run to run, as in mlx-lm
//	-stop TEXT              stop before TEXT (repeatable)
//	-extra-eos-token TOKEN  another token that ends generation (repeatable)
//	-max-kv-size N          keep at most N positions per layer (rotating)
//	-kv-bits B, -kv-group-size G, -quantized-kv-start N
//	                        quantize the KV cache from position N on
//	-kv-dtype D             what the KV cache holds: float32, bfloat16 or
//	                        float16; by default, under float32 compute, the
//	                        checkpoint's half-precision dtype (its weights'
//	                        or a quantized checkpoint's scales'): half the
//	                        bytes of float32 to hold and read each step, as
//	                        llama.cpp's float16 cache; otherwise as computed
//	-prefill-step-size N    prompt tokens processed at once (default 256)
//	-dtype D                compute dtype: float32 (the default on the
//	                        CPU), bfloat16, float16, or checkpoint. float32
//	                        computes a half-precision checkpoint on its own
//	                        values, kept as stored: libmlx's half-precision
//	                        arithmetic rounds after every operation and is
//	                        several times slower on a CPU, and float32 is
//	                        at least as close to the exact result as
//	                        mlx-lm's run at the checkpoint's dtype.
//	                        checkpoint computes in the checkpoint's own
//	                        dtypes, mlx-lm's arithmetic to the bit (as does
//	                        -dtype bfloat16 on a bfloat16 checkpoint)
//	-verbose=false          print only the text
//	-memory-limit SIZE      refuse weights larger than SIZE (8GB, 512MiB,
//	                        bytes) and stop once MLX holds more; also sets
//	                        MLX's own limit, which the timing line reports
//	-draft-model PATH       a smaller model sharing the tokenizer that
//	                        drafts tokens for the model to check in one
//	                        forward (speculative decoding): greedy, the
//	                        model's own tokens; sampled, distributed as its
//	                        own draws. The timing lines add the drafts kept
//	-num-draft-tokens N     tokens drafted a step (default 3)
//	-lookup                 draft by prompt lookup instead: the tokens that
//	                        followed the last 1-3 tokens where they came
//	                        before, in the prompt or the reply
//
// Generation ends at a stop token: the tokenizer's eos token and every id
// of config.json's and generation_config.json's eos_token_id (an id or a
// list), as mlx-lm merges them (archgen.StopTokens). Every flag is checked
// before the model loads.
//
// # Interrupting
//
// Ctrl-C (SIGINT) stops generate after the prompt chunk under way
// (-prefill-step-size tokens), or after the token under way: archrun
// prints the figures so far (how much of the prompt was processed) and
// exits with status 130, without an error message. A second Ctrl-C ends it
// at once. In chat, Ctrl-C stops the answer and returns to the prompt; at
// the prompt, or a second time, it quits.
//
// While weights load, and while a prompt of more than one chunk is
// processed, a progress line shows on standard error when it is a
// terminal: the prompt's tokens done of all and the speed so far.
//
// # The others
//
// logits writes the prefill logits of the tokens as float32, shape
// [T, vocab], in numpy's .npy format. greedy prints the n tokens greedy
// decoding with the KV cache produces, space-separated, on one line.
// convert writes a GGUF file as a Hugging Face model directory
// (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
// that archrun and mlx-lm both load.
//
// # serve
//
// serve answers the OpenAI API over HTTP (package serve): GET /v1/models,
// GET /health, POST /v1/chat/completions and POST /v1/completions,
// streamed or not, on -host (127.0.0.1) and -port (8080; 0 picks a free one,
// printed on standard error). At most -max-batch requests (8) decode at
// once in one batch, the rest queue; -prompt-cache-bytes (1GiB; 0 for none)
// bounds the cache of earlier prompts' KV. -context-length refuses prompts
// that long (default: the model's max_position_embeddings), -max-tokens is
// a request's budget when it gives none (512), -served-model-name the id
// clients give (default: the model's path as given). -hf ORG/NAME names a
// repo in the Hugging Face cache, as -model does. SIGTERM or Ctrl-C stops
// taking requests, lets running ones finish and exits with status 0.
//
// # pull
//
// pull downloads a model repo from the Hugging Face Hub into the Hugging
// Face cache, in the layout huggingface_hub and mlx-lm share (blobs/
// named by checksum, snapshots/COMMIT of relative symlinks, refs/), and
// prints the snapshot folder on standard output:
//
//	archrun pull HuggingFaceTB/SmolLM2-135M-Instruct
//	archrun pull mlx-community/Qwen3-0.6B-4bit@main -exclude '*.md'
//	archrun pull ORG/NAME-GGUF -include '*Q4_K_M.gguf'
//
// By default it fetches what a model needs (config.json,
// generation_config.json, model*.safetensors and their index, the
// tokenizer's files and the chat template); -include GLOB,... fetches the
// files those patterns match instead (GGUF files come only so), -exclude
// GLOB,... leaves files out, with huggingface_hub's patterns (* matches /
// too). Files the cache holds are not fetched again; a pull cut off (by
// Ctrl-C, or the network) goes on where it stopped the next time, with a
// Range request; every file is checked against the checksum the Hub gives
// (an LFS file's sha256, another's git blob id) before it enters the
// cache. HF_TOKEN (or `hf auth login`'s token file) is sent for gated and
// private repos, to the Hub alone; -endpoint (HF_ENDPOINT) names a mirror;
// -cache-dir another cache. A repo or revision the Hub does not have, and a
// gated repo without a token, are errors naming the repo, the HTTP status
// and what to do.
//
// # launch
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
// Exit status: 0 on success and after help, 1 on an error, 2 on a mistake
// in the command line, 130 after Ctrl-C.
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
	err := runIO(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case errors.Is(err, errHelp):
		os.Exit(0)
	case errors.Is(err, errInterrupted):
		os.Exit(130)
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "archrun:", err)
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

const usageText = `usage: archrun COMMAND [flags]

commands:
  chat      talk with a model: a REPL that keeps the KV cache across turns
  generate  generate after one prompt, streaming the text
  embed     print (or write as .npy) one embedding per input
  convert   write a GGUF file as a model directory
  logits    write the prompt's logits as .npy
  greedy    print greedy decoding's token ids
  serve     serve the model over HTTP with the OpenAI API (batched, with a prompt cache)
  launch    run generate, logits or greedy over a group of processes (tensor parallelism)
  pull      download a model from the Hugging Face Hub into the cache
  list      list the supported architectures

A model is a directory (config.json, safetensors, tokenizer.json), a .gguf
file, or a Hugging Face repo id (downloaded into the Hugging Face cache
when it lacks it; -offline or HF_HUB_OFFLINE=1 reads the cache alone) or
cache folder.

"archrun help COMMAND" or "archrun COMMAND -h" shows a command's flags;
"go doc github.com/archgen/archgen/cmd/archrun" is the manual.
`

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errHelp ends archrun with status 0 once help is printed.
var errHelp = errors.New("help shown")

// app is where a command reads and writes.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	help           bool // print the command's help and stop
}

// command is one archrun command's flag set, with its synopsis and what it
// does, for its help.
type command struct {
	*flag.FlagSet
	synopsis, doc string
	rest          bool // it takes arguments after its flags (launch: the command it runs)
}

// flags is a command's flag set; its own output is silenced: parse turns
// its errors into usage errors and prints help to stdout.
func (a *app) flags(name, synopsis, doc string) *command {
	fs := flag.NewFlagSet("archrun "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &command{FlagSet: fs, synopsis: synopsis, doc: doc}
}

// printHelp writes the command's help.
func (c *command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: %s %s\n\n%s\n\nflags:\n", c.Name(), c.synopsis, c.doc)
	c.SetOutput(w)
	c.PrintDefaults()
	c.SetOutput(io.Discard)
}

// parse parses args and refuses leftovers (unless the command takes them); -h, -help, --help and a lone
// "help" print the command's help.
func (a *app) parse(c *command, args []string) error {
	if a.help || (len(args) == 1 && args[0] == "help") {
		c.printHelp(a.stdout)
		return errHelp
	}
	if err := c.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp(a.stdout)
			return errHelp
		}
		return usagef("%v (%q lists the flags)", err, c.Name()+" -h")
	}
	if c.NArg() > 0 && !c.rest {
		return usagef("unexpected arguments %q (%q lists the flags)", c.Args(), c.Name()+" -h")
	}
	return nil
}

// run runs one archrun command line (without the program name), with no
// standard input.
func run(args []string, stdout, stderr io.Writer) error {
	return runIO(args, strings.NewReader(""), stdout, stderr)
}

// runIO runs one archrun command line.
func runIO(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return usagef("no command (chat, generate, embed, serve, convert, logits, greedy, launch, pull or list)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 {
			fmt.Fprint(stdout, usageText)
			return errHelp
		}
		a.help = true
		args = args[1:]
	}
	cmds := map[string]func([]string) error{
		"chat":     a.chat,
		"logits":   a.logits,
		"greedy":   a.greedy,
		"generate": a.generate,
		"embed":    a.embed,
		"convert":  a.convert,
		"list":     a.list,
		"launch":   a.launch,
		"serve":    a.serve,
		"pull":     a.pull,
	}
	cmd, ok := cmds[args[0]]
	if ok && launchable[args[0]] && inGroup() && groupRank() != 0 {
		// a rank of a group other than 0 runs its shard silently
		a.stdout, a.stderr = io.Discard, io.Discard
	}
	if !ok {
		return usagef("unknown command %q (chat, generate, embed, serve, convert, logits, greedy, launch, pull or list; \"archrun -h\" for help)", args[0])
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
	if err := a.parse(a.flags("list", "", "Lists the architectures archgen runs, their support tiers and aliases."), args); err != nil {
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
