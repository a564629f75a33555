package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/archgen/archgen"
	"github.com/archgen/archgen/constrain"
	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// strs is a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

// genFlags are the flags generate and chat share.
type genFlags struct {
	src            source
	system         string
	maxTokens      int
	verbose        bool
	s              generate.Sampling
	seed           uint64
	stops          strs
	extraEOS       strs
	ko             kv.Options
	kvDtype        string
	templateConfig string
	vars           map[string]any
	prefillStep    int
	jsonSchema     string // a file holding a JSON schema the reply must match
	grammar        string // a file holding a GBNF grammar (Lark after a %llguidance line)
	draftModel     string // a draft model for speculative decoding
	numDraft       int
	lookup         bool            // prompt lookup drafts
	set            map[string]bool // the flags the command line gave
}

func (f *genFlags) define(fs *flag.FlagSet) {
	f.src.flags(fs, true)
	fs.StringVar(&f.system, "system-prompt", "", "a system message before the prompt")
	fs.IntVar(&f.maxTokens, "max-tokens", 256, "tokens to generate at most")
	fs.IntVar(&f.maxTokens, "n", 256, "short for -max-tokens")
	fs.BoolVar(&f.verbose, "verbose", true, "print the timing lines after the text")
	fs.Float64Var(&f.s.Temp, "temp", 0, "sampling temperature (0: greedy)")
	fs.Float64Var(&f.s.TopP, "top-p", 0, "nucleus sampling mass (used in (0, 1))")
	fs.Float64Var(&f.s.MinP, "min-p", 0, "min-p sampling (used when > 0)")
	fs.IntVar(&f.s.MinTokensToKeep, "min-tokens-to-keep", 1, "tokens min-p keeps at least")
	fs.IntVar(&f.s.TopK, "top-k", 0, "top-k sampling (used when > 0)")
	fs.Float64Var(&f.s.RepetitionPenalty, "repetition-penalty", 0, "penalty for repeated tokens (0 or 1: off)")
	fs.IntVar(&f.s.RepetitionContext, "repetition-context-size", 20, "tokens the penalty looks back over")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed (default: a random one, so that each run samples anew)")
	fs.Var(&f.stops, "stop", "stop before this text (repeatable)")
	fs.Var(&f.extraEOS, "extra-eos-token", "another token that ends generation (repeatable)")
	fs.IntVar(&f.ko.MaxKVSize, "max-kv-size", 0, "positions each layer keeps at most (0: all)")
	fs.IntVar(&f.ko.KVBits, "kv-bits", 0, "quantize the KV cache to these bits (0: off)")
	fs.IntVar(&f.ko.KVGroupSize, "kv-group-size", 0, "KV quantization group size (default 64)")
	fs.IntVar(&f.ko.QuantizedKVStart, "quantized-kv-start", 0, "position from which the KV cache is quantized")
	fs.StringVar(&f.kvDtype, "kv-dtype", "", "dtype the KV cache holds: float32, bfloat16 or float16 (default: the checkpoint's half-precision dtype under float32 compute, as computed otherwise)")
	fs.StringVar(&f.templateConfig, "chat-template-config", "", `JSON object of further chat template variables, e.g. {"enable_thinking": false}`)
	fs.IntVar(&f.prefillStep, "prefill-step-size", 256, "prompt tokens processed at once (Ctrl-C stops after the chunk under way)")
	fs.StringVar(&f.jsonSchema, "json-schema", "", "a file holding a JSON schema the reply must match (constrained decoding)")
	fs.StringVar(&f.grammar, "grammar", "", "a file holding a GBNF grammar the reply must match (llguidance's Lark after a first line %llguidance)")
	fs.StringVar(&f.draftModel, "draft-model", "", "a smaller model sharing the tokenizer that drafts tokens for this one to check (speculative decoding; as -model takes one)")
	fs.IntVar(&f.numDraft, "num-draft-tokens", generate.DefaultNumDraft, "tokens the draft model (or prompt lookup) drafts a step")
	fs.BoolVar(&f.lookup, "lookup", false, "draft by prompt lookup: the tokens that followed the last 1-3 tokens where they came before, in the prompt or the reply (speculative decoding without a draft model)")
}

// check validates the flags, before anything loads.
func (f *genFlags) check(fs *flag.FlagSet) error {
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if err := f.src.check(); err != nil {
		return err
	}
	if f.maxTokens < 1 {
		return usagef("-max-tokens %d: want at least 1", f.maxTokens)
	}
	if f.prefillStep < 1 {
		return usagef("-prefill-step-size %d: want at least 1", f.prefillStep)
	}
	if err := f.s.Check(0); err != nil {
		return usageError{err.Error()}
	}
	if f.kvDtype != "" {
		dt, err := mlx.ParseDtype(f.kvDtype)
		if err != nil || (dt != mlx.Float32 && dt != mlx.BFloat16 && dt != mlx.Float16) {
			return usagef("-kv-dtype %q: want float32, bfloat16 or float16", f.kvDtype)
		}
		f.ko.Dtype = dt
	}
	if err := f.ko.Check(); err != nil {
		return usageError{err.Error()}
	}
	if f.jsonSchema != "" && f.grammar != "" {
		return usagef("-json-schema and -grammar exclude each other")
	}
	if f.numDraft < 1 {
		return usagef("-num-draft-tokens %d: want at least 1", f.numDraft)
	}
	if f.draftModel != "" && f.lookup {
		return usagef("-draft-model and -lookup exclude each other")
	}
	if f.draftModel != "" || f.lookup {
		flag := "-draft-model"
		if f.lookup {
			flag = "-lookup"
		}
		switch {
		case f.jsonSchema != "" || f.grammar != "":
			return usagef("%s and a constraint (-json-schema, -grammar) exclude each other", flag)
		case f.s.RepetitionPenalty != 0 && f.s.RepetitionPenalty != 1:
			return usagef("%s and -repetition-penalty exclude each other", flag)
		case f.ko.MaxKVSize > 0:
			return usagef("%s and -max-kv-size exclude each other: speculative decoding rewinds the caches, which a bounded cache cannot", flag)
		}
	}
	if f.templateConfig != "" {
		if err := json.Unmarshal([]byte(f.templateConfig), &f.vars); err != nil || f.vars == nil {
			return usagef("-chat-template-config %q: want a JSON object, such as {\"enable_thinking\": false}", f.templateConfig)
		}
	}
	// mlx-lm seeds only when asked: each unseeded run samples anew.
	f.s.Seed = f.seed
	if !f.set["seed"] {
		var b [8]byte
		_, _ = rand.Read(b[:])
		f.s.Seed = binary.LittleEndian.Uint64(b[:])
	}
	return nil
}

// options are the generation options, once the model is loaded.
func (f *genFlags) options(m *archgen.Model) (archgen.Options, error) {
	if f.s.TopK > 0 {
		if err := f.s.Check(m.Net.Info().VocabSize); err != nil {
			return archgen.Options{}, usageError{err.Error()}
		}
	}
	o := archgen.Options{
		Sampling: f.s, MaxTokens: f.maxTokens, StopStrings: f.stops, TemplateVars: f.vars,
		KV: f.ko, PrefillStep: f.prefillStep, MemoryLimit: f.src.limit, NumDraft: f.numDraft,
	}
	if f.lookup {
		o.Lookup = lookupNgram
	}
	for _, t := range f.extraEOS {
		id, ok := m.Tokenizer.TokenToID(t)
		if !ok {
			return o, fmt.Errorf("-extra-eos-token %q is not a token of the tokenizer", t)
		}
		o.ExtraStopTokens = append(o.ExtraStopTokens, id)
	}
	return o, nil
}

// lookupNgram is the longest n-gram -lookup matches.
const lookupNgram = 3

// loadDraft loads -draft-model's model (nil without one): source.loadDraft.
func (f *genFlags) loadDraft(ctx context.Context) (*archgen.Model, error) {
	return f.src.loadDraft(ctx, f.draftModel)
}

// constraint compiles -json-schema's or -grammar's file for m into a
// matcher for one generation (nil when neither is given); free releases it
// and what it was made from.
func (f *genFlags) constraint(m *archgen.Model, stops []int32) (c *constrain.Matcher, free func(), err error) {
	flag, path := "-json-schema", f.jsonSchema
	if f.grammar != "" {
		flag, path = "-grammar", f.grammar
	}
	if path == "" {
		return nil, func() {}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	v, err := constrain.NewVocab(m.Tokenizer, stops)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	var g *constrain.Grammar
	switch lark, isLark := strings.CutPrefix(string(data), "%llguidance"); {
	case f.jsonSchema != "":
		g, err = v.JSONSchema(data)
	case isLark:
		g, err = v.Lark(lark)
	default:
		g, err = v.GBNF(string(data))
	}
	if err == nil {
		c, err = g.NewMatcher()
		g.Free()
	}
	if err != nil {
		v.Free()
		return nil, nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return c, func() { c.Free(); v.Free() }, nil
}

func (a *app) generate(args []string) error {
	fs := a.flags("generate", "(-model PATH | -gguf FILE) (-prompt TEXT | -f FILE) [flags]",
		"Generates after a prompt, with the model's chat template unless told otherwise, and prints the text as it comes.")
	var f genFlags
	f.define(fs.FlagSet)
	prompt := fs.String("prompt", "", `the prompt ("-" reads standard input)`)
	fs.StringVar(prompt, "p", "", "short for -prompt")
	file := fs.String("f", "", "read the prompt from this file")
	useChat := fs.Bool("chat", false, "require the tokenizer's chat template")
	ignoreChat := fs.Bool("ignore-chat-template", false, "use the prompt as it is")
	cacheFile := fs.String("prompt-cache-file", "", "a prompt cache (mlx_lm.cache_prompt's, or archrun chat's /save) the prompt continues")
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if *cacheFile != "" && f.src.path() == "" {
		// As mlx_lm.generate: the model that made the cache.
		meta, err := kv.ReadMetadata(*cacheFile)
		if err != nil {
			return err
		}
		f.src.dir = meta["model"]
	}
	if err := f.check(fs.FlagSet); err != nil {
		return err
	}
	text := strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(*prompt)
	switch {
	case *file != "" && *prompt != "":
		return usagef("-prompt and -f exclude each other")
	case *file != "":
		b, err := os.ReadFile(*file)
		if err != nil {
			return usagef("-f: %v", err)
		}
		text = string(b)
	case text == "-":
		b, err := io.ReadAll(a.stdin)
		if err != nil {
			return err
		}
		text = string(b)
	}
	if text == "" {
		return usagef("-prompt is required (and may not be empty)")
	}
	if *useChat && *ignoreChat {
		return usagef("-chat and -ignore-chat-template exclude each other")
	}
	if *cacheFile != "" {
		meta, err := kv.ReadMetadata(*cacheFile)
		if err != nil {
			return err
		}
		if m := meta["model"]; m != "" && m != f.src.path() {
			return fmt.Errorf("-prompt-cache-file %s was made with the model %s, not %s: pass that model, or none", *cacheFile, m, f.src.path())
		}
	}

	intr := newInterrupts()
	defer intr.stop()
	ctx, done := intr.turn()
	defer done()
	m, err := f.src.load(ctx, true)
	if err == nil {
		if err = m.CheckGenerative(); err != nil {
			m.Free()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	defer m.Free()
	opts, err := f.options(m)
	if err != nil {
		return err
	}
	if opts.Draft, err = f.loadDraft(ctx); err != nil {
		return err
	}
	if opts.Draft != nil {
		defer opts.Draft.Free()
	}
	if *useChat && m.Template == nil {
		return errors.New("-chat: the tokenizer has no chat template")
	}
	useTemplate := m.Template != nil && !*ignoreChat
	con, freeCon, err := f.constraint(m, append(slices.Clone(m.StopTokens), opts.ExtraStopTokens...))
	if err != nil {
		return err
	}
	defer freeCon()
	if con != nil {
		opts.Constraint = con
	}
	sess, err := m.NewSession(f.ko)
	if err != nil {
		return err
	}
	defer sess.Free()
	var msgs []archgen.Message
	if f.system != "" {
		msgs = append(msgs, archgen.Message{Role: "system", Content: f.system})
	}
	msgs = append(msgs, archgen.Message{Role: "user", Content: text})
	run := func(opts archgen.Options, onText func(string) error) (archgen.Result, error) {
		switch {
		case *cacheFile != "":
			if _, err := sess.Load(*cacheFile); err != nil {
				return archgen.Result{}, err
			}
			ids, err := suffixTokens(m, msgs, text, useTemplate, f.vars)
			if err != nil {
				return archgen.Result{}, err
			}
			return sess.Append(ctx, ids, opts, onText)
		case useTemplate:
			return sess.Chat(ctx, msgs, opts, onText)
		}
		return sess.Generate(ctx, text, opts, onText)
	}
	res, err := a.turn(opts, run)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if f.verbose {
		a.figures(res, f.src.limit)
		fmt.Fprintln(a.stderr, f.src.computeLine(m.Net.Info().Dtype))
		fmt.Fprintln(a.stderr, cacheLine(m.Net.Info(), f.ko.Dtype))
		if g := f.src.group; g != nil && g.Size() > 1 {
			calls, bytes := g.AllSumStats()
			fmt.Fprintf(a.stderr, "Shard: rank %d of %d, weights %.3f GB; all_sum: %d ops, %d bytes from each rank over %d tokens\n",
				g.Rank(), g.Size(), float64(m.Net.Info().Nbytes)/1e9, calls, bytes, res.Stats.PromptTokens+res.Stats.Tokens)
		}
	}
	if err != nil {
		return errInterrupted
	}
	return nil
}

// turn runs one generation, printing its text to stdout and, on a
// terminal, a progress line for long prompts to stderr.
func (a *app) turn(opts archgen.Options, run func(archgen.Options, func(string) error) (archgen.Result, error)) (archgen.Result, error) {
	if a.terminal() {
		start := time.Now()
		shown := false
		opts.OnPrompt = func(done, total int) {
			if done == total && !shown {
				return
			}
			shown = true
			rate := float64(done) / time.Since(start).Seconds()
			fmt.Fprintf(a.stderr, "\r\033[Kprompt: %d/%d tokens, %.1f tok/s", done, total, rate)
			if done == total {
				fmt.Fprint(a.stderr, "\r\033[K")
			}
		}
	}
	res, err := run(opts, func(s string) error {
		_, err := io.WriteString(a.stdout, s)
		return err
	})
	fmt.Fprintln(a.stdout)
	return res, err
}

// terminal tells whether stderr is a terminal (progress lines go there).
func (a *app) terminal() bool {
	f, ok := a.stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// figures prints the timing lines of a generation, as mlx_lm.generate
// does; an interrupted prompt says how far it got.
func (a *app) figures(res archgen.Result, limit uint64) {
	st := res.Stats
	if st.PromptDone < res.Processed() {
		fmt.Fprintf(a.stderr, "Interrupted: prompt %d of %d tokens processed\n", st.PromptDone, res.Processed())
		fmt.Fprintf(a.stderr, "Prompt: %d tokens, %.3f tokens-per-sec\n", st.PromptDone, rateOf(st.PromptDone, st.PromptTime))
	} else {
		fmt.Fprintf(a.stderr, "Prompt: %d tokens, %.3f tokens-per-sec\n", st.PromptTokens, st.PromptTPS())
	}
	fmt.Fprintf(a.stderr, "Generation: %d tokens, %.3f tokens-per-sec\n", st.Tokens, st.GenerateTPS())
	if st.Drafted > 0 {
		fmt.Fprintf(a.stderr, "Draft: %d of %d drafted tokens accepted (%.1f%%)\n", st.Accepted, st.Drafted, 100*st.AcceptRate())
	}
	lim := ""
	if limit > 0 {
		lim = fmt.Sprintf(" (limit %.3f GB)", float64(mlx.MemoryLimit())/1e9)
	}
	fmt.Fprintf(a.stderr, "Peak memory: %.3f GB%s\n", float64(st.PeakMemory)/1e9, lim)
}

func rateOf(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// suffixTokens are the tokens a prompt adds after a cached prompt, as
// mlx_lm.generate finds them: with the chat template, the rendered
// conversation from where the user's text starts (the cached prefix being
// the template's opening); without, the prompt encoded as it is.
func suffixTokens(m *archgen.Model, msgs []archgen.Message, text string, useTemplate bool, vars map[string]any) ([]int32, error) {
	if !useTemplate {
		return m.Tokenizer.Encode(text, true), nil
	}
	full, err := m.RenderChat(msgs, vars)
	if err != nil {
		return nil, err
	}
	probe := append([]archgen.Message(nil), msgs...)
	probe[len(probe)-1].Content = "<query>"
	test, err := m.RenderChat(probe, vars)
	if err != nil {
		return nil, err
	}
	i := strings.Index(test, "<query>")
	if i < 0 || i > len(full) {
		return nil, errors.New("-prompt-cache-file: the chat template does not show the prompt's text")
	}
	return m.Tokenizer.Encode(full[i:], false), nil
}
