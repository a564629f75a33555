package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/chat"
)

// strs is a repeatable string flag.
type strs []string

func (s *strs) String() string     { return strings.Join(*s, ",") }
func (s *strs) Set(v string) error { *s = append(*s, v); return nil }

func (a *app) generate(args []string) error {
	fs := a.flags("generate")
	var src source
	src.flags(fs, true)
	prompt := fs.String("prompt", "", `the prompt ("-" reads standard input)`)
	system := fs.String("system-prompt", "", "a system message before the prompt")
	useChat := fs.Bool("chat", false, "require the tokenizer's chat template")
	ignoreChat := fs.Bool("ignore-chat-template", false, "use the prompt as it is")
	maxTokens := fs.Int("max-tokens", 256, "tokens to generate at most")
	verbose := fs.Bool("verbose", true, "print the timing line after the text")
	var s generate.Sampling
	fs.Float64Var(&s.Temp, "temp", 0, "sampling temperature (0: greedy)")
	fs.Float64Var(&s.TopP, "top-p", 0, "nucleus sampling mass (used in (0, 1))")
	fs.Float64Var(&s.MinP, "min-p", 0, "min-p sampling (used when > 0)")
	fs.IntVar(&s.MinTokensToKeep, "min-tokens-to-keep", 1, "tokens min-p keeps at least")
	fs.IntVar(&s.TopK, "top-k", 0, "top-k sampling (used when > 0)")
	fs.Float64Var(&s.RepetitionPenalty, "repetition-penalty", 0, "penalty for repeated tokens (0 or 1: off)")
	fs.IntVar(&s.RepetitionContext, "repetition-context-size", 20, "tokens the penalty looks back over")
	fs.Uint64Var(&s.Seed, "seed", 0, "random seed")
	var stops, extraEOS strs
	fs.Var(&stops, "stop", "stop before this text (repeatable)")
	fs.Var(&extraEOS, "extra-eos-token", "another token that ends generation (repeatable)")
	var ko kv.Options
	fs.IntVar(&ko.MaxKVSize, "max-kv-size", 0, "positions each layer keeps at most (0: all)")
	fs.IntVar(&ko.KVBits, "kv-bits", 0, "quantize the KV cache to these bits (0: off)")
	fs.IntVar(&ko.KVGroupSize, "kv-group-size", 0, "KV quantization group size (default 64)")
	fs.IntVar(&ko.QuantizedKVStart, "quantized-kv-start", 0, "position from which the KV cache is quantized")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := src.check(); err != nil {
		return err
	}
	text := strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(*prompt)
	if text == "-" {
		b, err := io.ReadAll(os.Stdin)
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
	if *maxTokens < 1 {
		return usagef("-max-tokens %d: want at least 1", *maxTokens)
	}
	if err := ko.Check(); err != nil {
		return usageError{err.Error()}
	}
	m, tok, err := src.load(true)
	if err != nil {
		return err
	}
	defer m.Free()
	ids, err := promptTokens(tok, text, *system, *useChat, *ignoreChat)
	if err != nil {
		return err
	}
	caches, err := m.NewCachesWith(ko)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	eos, err := stopTokens(tok, extraEOS)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := generate.TextOptions{
		Options: generate.Options{
			Sampling: s, MaxTokens: *maxTokens, StopTokens: eos, Caches: caches, Vocab: m.Info().VocabSize,
			MemoryLimit: src.limit,
		},
		StopStrings: stops,
		OnText: func(s string) error {
			_, err := io.WriteString(a.stdout, s)
			return err
		},
	}
	_, st, err := generate.Text(ctx, m, ids, tok.NewStream(true), opts)
	fmt.Fprintln(a.stdout)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if *verbose {
		fmt.Fprintf(a.stderr, "Prompt: %d tokens, %.3f tokens-per-sec\n", st.PromptTokens, st.PromptTPS())
		fmt.Fprintf(a.stderr, "Generation: %d tokens, %.3f tokens-per-sec\n", st.Tokens, st.GenerateTPS())
		limit := ""
		if src.limit > 0 {
			limit = fmt.Sprintf(" (limit %.3f GB)", float64(mlx.MemoryLimit())/1e9)
		}
		fmt.Fprintf(a.stderr, "Peak memory: %.3f GB%s\n", float64(st.PeakMemory)/1e9, limit)
		if g := src.group; g != nil && g.Size() > 1 {
			calls, bytes := g.AllSumStats()
			fmt.Fprintf(a.stderr, "Shard: rank %d of %d, weights %.3f GB; all_sum: %d ops, %d bytes from each rank over %d tokens\n",
				g.Rank(), g.Size(), float64(m.Info().Nbytes)/1e9, calls, bytes, st.PromptTokens+st.Tokens)
		}
	}
	return err
}

// promptTokens renders and encodes the prompt as mlx_lm.generate does: with
// the chat template when the tokenizer has one (and it is not ignored),
// adding no special tokens beyond the template's; as plain text otherwise.
func promptTokens(tok *tokenizer.Pretrained, text, system string, require, ignore bool) ([]int32, error) {
	tmpl := tok.Config.ChatTemplate
	if require && tmpl == "" {
		return nil, errors.New("-chat: the tokenizer has no chat template")
	}
	if tmpl == "" || ignore {
		return tok.Encode(text, true), nil
	}
	t, err := chat.Compile(tmpl)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	var msgs []chat.Message
	if system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: text})
	rendered, err := t.Render(msgs, chat.Options{
		AddGenerationPrompt: true, BOSToken: tok.Config.BOSToken, EOSToken: tok.Config.EOSToken,
	})
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return tok.Encode(rendered, false), nil
}

// stopTokens are the ids that end generation: the tokenizer's eos and the
// extra ones named.
func stopTokens(tok *tokenizer.Pretrained, extra []string) ([]int32, error) {
	var ids []int32
	if tok.EOS >= 0 {
		ids = append(ids, tok.EOS)
	}
	for _, t := range extra {
		id, ok := tok.TokenToID(t)
		if !ok {
			return nil, fmt.Errorf("-extra-eos-token %q is not a token of the tokenizer", t)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
