package archgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/tokenizer/chat"
)

// Options are the knobs of one Chat or Generate call.
type Options struct {
	// Sampling: temperature, top-p, min-p, top-k, repetition penalty and
	// the seed, as mlx-lm's sampler reads them. The zero value is greedy.
	generate.Sampling
	// MaxTokens bounds the tokens generated (default 256).
	MaxTokens int
	// StopStrings end generation where one appears; the text stops before
	// it.
	StopStrings []string
	// ExtraStopTokens end generation beside the model's StopTokens.
	ExtraStopTokens []int32
	// TemplateVars are further variables for the chat template, as the
	// keyword arguments of apply_chat_template ({"enable_thinking": false}).
	TemplateVars map[string]any
	// KV chooses the caches of a call on Model (a Session has its own):
	// bounded, rotating or quantized, as mlx-lm's max_kv_size and kv_bits.
	KV kv.Options
	// PrefillStep is how many prompt tokens go through the model at once
	// (default 2048). A cancelled context stops the prompt after the chunk
	// under way, so a smaller step cancels sooner.
	PrefillStep int
	// OnPrompt, when set, is told after each prompt chunk how many of the
	// call's new prompt tokens went through the model, of how many.
	OnPrompt func(done, total int)
	// MemoryLimit, when set, stops generation with generate.ErrMemoryLimit
	// once MLX holds more bytes.
	MemoryLimit uint64
	// Constraint, when set, holds the reply to a JSON schema or grammar
	// (package constrain: NewVocab(m.Tokenizer, m.StopTokens), then
	// JSONSchema, Regex, Lark or GBNF, then NewMatcher); one a call, freed
	// by the caller.
	Constraint generate.Constraint
	// Draft, when set, is a smaller model sharing the tokenizer that
	// drafts NumDraft tokens (default 3) a step for this one to check:
	// speculative decoding (generate.Options.Draft). A Session keeps the
	// draft's caches beside its own, holding the same tokens.
	Draft    *Model
	NumDraft int
	// Lookup > 0 drafts by prompt lookup instead (n-grams of up to Lookup
	// tokens from the prompt and the reply so far; generate.Options.Lookup).
	Lookup int
}

// Result is what a Chat or Generate call produced.
type Result struct {
	// Text is the text generated (what onText was given).
	Text string
	// Finish is why generation ended: "stop" (a stop token or string),
	// "length" (MaxTokens) or "cancelled".
	Finish generate.Finish
	// PromptTokens is the prompt's length in tokens; CachedTokens of them
	// were in the session's cache already, and PromptTokens - CachedTokens
	// went through the model in this call.
	PromptTokens, CachedTokens int
	// Tokens is the number of tokens generated, the stop token excluded.
	Tokens int
	// Stats are the timings and the peak memory.
	Stats generate.Stats
}

// Processed is the number of prompt tokens this call ran through the
// model: the prompt less what the cache held.
func (r Result) Processed() int { return r.PromptTokens - r.CachedTokens }

// Chat answers the conversation in messages: it renders them with the
// chat template, then generates the assistant's turn, passing the text to
// onText (which may be nil) as it comes. onText may return
// generate.ErrStopped to end the turn early.
func (m *Model) Chat(ctx context.Context, messages []Message, opts Options, onText func(string) error) (Result, error) {
	s, err := m.NewSession(opts.KV)
	if err != nil {
		return Result{}, err
	}
	defer s.Free()
	return s.Chat(ctx, messages, opts, onText)
}

// Generate continues prompt, a text given to the model as it is (no chat
// template); see Chat.
func (m *Model) Generate(ctx context.Context, prompt string, opts Options, onText func(string) error) (Result, error) {
	s, err := m.NewSession(opts.KV)
	if err != nil {
		return Result{}, err
	}
	defer s.Free()
	return s.Generate(ctx, prompt, opts, onText)
}

// RenderChat is the prompt text the chat template makes of messages,
// ending with the opening of the assistant's turn; vars are further
// template variables.
func (m *Model) RenderChat(messages []Message, vars map[string]any) (string, error) {
	if m.Tokenizer == nil {
		return "", ErrNoTokenizer
	}
	if m.Template == nil {
		return "", ErrNoTemplate
	}
	return m.Template.Render(messages, chat.Options{
		AddGenerationPrompt: true,
		BOSToken:            m.Tokenizer.Config.BOSToken,
		EOSToken:            m.Tokenizer.Config.EOSToken,
		Vars:                vars,
	})
}

// EncodeChat is the token ids of RenderChat's text: encoded without adding
// special tokens, since the template writes those it wants.
func (m *Model) EncodeChat(messages []Message, vars map[string]any) ([]int32, error) {
	text, err := m.RenderChat(messages, vars)
	if err != nil {
		return nil, err
	}
	return m.Tokenizer.Encode(text, false), nil
}

// EncodePrompt is the token ids of a plain prompt, as mlx-lm encodes one:
// with the tokenizer's special tokens (BOS), unless the text already starts
// with the BOS token.
func (m *Model) EncodePrompt(prompt string) ([]int32, error) {
	if m.Tokenizer == nil {
		return nil, ErrNoTokenizer
	}
	bos := m.Tokenizer.Config.BOSToken
	return m.Tokenizer.Encode(prompt, bos == "" || !strings.HasPrefix(prompt, bos)), nil
}

// Session is a conversation with its KV cache: each call processes only
// the tokens its cache does not hold yet, so a chat's later turns cost
// their own tokens only. A Session is not safe for concurrent use.
type Session struct {
	m      *Model
	kvOpts kv.Options
	caches []kv.Cache
	// tokens are the ids the caches hold, in order; nil with opaque set
	// for a cache loaded from a file that does not list them.
	tokens []int32
	opaque bool
	// The draft model of the last call that had one, and its caches.
	draft   *Model
	dcaches []kv.Cache
}

// NewSession starts an empty conversation with caches of the kinds o
// chooses. An encoder is refused (ErrEncoder): it does not generate.
func (m *Model) NewSession(o kv.Options) (*Session, error) {
	if err := m.CheckGenerative(); err != nil {
		return nil, err
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	caches, err := m.Net.NewCachesWith(o)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, kvOpts: o, caches: caches}, nil
}

// Free releases the caches.
func (s *Session) Free() {
	for _, c := range s.caches {
		c.Free()
	}
	s.caches = nil
	s.dropDraft()
}

// CheckDraft refuses a draft model that cannot draft for m: one whose
// embedding has more rows than m's (its drafts could name tokens m has no
// embedding for), or whose tokenizer is not m's (drafts whose ids mean
// other tokens would all be rejected, or, sampled, drawn from a
// distribution over other tokens). The tokenizers must give every id the
// same token; the embeddings may be padded to different sizes. A draft
// loaded without a tokenizer is taken as it is.
func (m *Model) CheckDraft(d *Model) error {
	if dv, v := d.Net.Info().VocabSize, m.Net.Info().VocabSize; dv > v {
		return fmt.Errorf("archgen: the draft model's vocabulary of %d tokens is larger than the model's %d: its drafts could name tokens the model has no embedding for", dv, v)
	}
	a, b := m.Tokenizer, d.Tokenizer
	if b == nil || a == nil || a == b {
		return nil
	}
	if a.VocabSize() != b.VocabSize() {
		return fmt.Errorf("archgen: the draft model's tokenizer has %d tokens and the model's %d: they must share a tokenizer", b.VocabSize(), a.VocabSize())
	}
	for id := range int32(a.VocabSize()) {
		x, xok := a.IDToToken(id)
		y, yok := b.IDToToken(id)
		if x != y || xok != yok {
			return fmt.Errorf("archgen: the draft model's tokenizer reads id %d as %q and the model's as %q: they must share a tokenizer", id, y, x)
		}
	}
	return nil
}

// dropDraft releases the draft model's caches.
func (s *Session) dropDraft() {
	for _, c := range s.dcaches {
		c.Free()
	}
	s.draft, s.dcaches = nil, nil
}

// draftCaches are d's caches holding what the session's caches hold
// (their first n tokens): kept from the last call, cut back, or run
// through d where they lack some.
func (s *Session) draftCaches(d *Model, n int) ([]kv.Cache, error) {
	if s.draft != d {
		s.dropDraft()
		s.draft, s.dcaches = d, d.Net.NewCaches()
	}
	have := 0
	if len(s.dcaches) > 0 {
		have = s.dcaches[0].Offset()
	}
	if have > n {
		for _, c := range s.dcaches {
			c.Trim(have - n)
		}
		if have = s.dcaches[0].Offset(); have != n {
			s.dropDraft()
			return s.draftCaches(d, n)
		}
	}
	if have < n {
		if s.opaque {
			return nil, errors.New("the session's cache came from a file that does not list its tokens: the draft model cannot be given them")
		}
		for start := have; start < n; start += 2048 {
			chunk := s.tokens[start:min(start+2048, n)]
			if err := d.prefill(chunk, 1, s.dcaches, nil); err != nil {
				return nil, fmt.Errorf("draft model: %w", err)
			}
		}
	}
	return s.dcaches, nil
}

// Reset empties the caches, keeping their kinds.
func (s *Session) Reset() {
	for _, c := range s.caches {
		c.Trim(c.Offset())
	}
	if s.Cached() > 0 {
		// A cache that cannot be trimmed any more starts anew.
		s.Free()
		s.caches, _ = s.m.Net.NewCachesWith(s.kvOpts) // checked by NewSession
	}
	s.tokens, s.opaque = nil, false
	s.dropDraft()
}

// Cached is the number of positions the caches hold.
func (s *Session) Cached() int {
	if len(s.caches) == 0 {
		return 0
	}
	return s.caches[0].Offset()
}

// Tokens are the ids the caches hold (nil for a cache loaded from a file
// that does not list them).
func (s *Session) Tokens() []int32 { return slices.Clone(s.tokens) }

// Chat renders the whole conversation, then generates after the part of it
// the caches do not hold: on a session that answered messages[:n] before,
// that is the rest of the conversation from the end of the last answer.
func (s *Session) Chat(ctx context.Context, messages []Message, opts Options, onText func(string) error) (Result, error) {
	ids, err := s.m.EncodeChat(messages, opts.TemplateVars)
	if err != nil {
		return Result{}, err
	}
	if s.opaque {
		return Result{}, errors.New("the session's cache came from a file that does not list its tokens: a chat cannot tell which of its turns the cache holds (continue it with Append)")
	}
	return s.run(ctx, ids, opts, onText)
}

// Generate continues the session with prompt, a plain text (see
// Model.Generate), matched against the tokens the caches hold.
func (s *Session) Generate(ctx context.Context, prompt string, opts Options, onText func(string) error) (Result, error) {
	ids, err := s.m.EncodePrompt(prompt)
	if err != nil {
		return Result{}, err
	}
	if s.opaque {
		return s.Append(ctx, ids, opts, onText)
	}
	return s.run(ctx, ids, opts, onText)
}

// Append generates after ids, appended to whatever the caches hold
// (mlx_lm.generate's -prompt-cache-file: the ids continue the cached
// prompt).
func (s *Session) Append(ctx context.Context, ids []int32, opts Options, onText func(string) error) (Result, error) {
	if !s.opaque {
		ids = append(slices.Clone(s.tokens), ids...)
		return s.run(ctx, ids, opts, onText)
	}
	return s.generate(ctx, s.Cached(), ids, opts, onText)
}

// run generates after ids, the whole token sequence of the conversation:
// the caches keep the longest prefix they share with it and process the
// rest.
func (s *Session) run(ctx context.Context, ids []int32, opts Options, onText func(string) error) (Result, error) {
	if len(ids) == 0 {
		return Result{}, errors.New("empty prompt: at least one token is needed")
	}
	common := 0
	for common < len(ids) && common < len(s.tokens) && ids[common] == s.tokens[common] {
		common++
	}
	if common == len(ids) {
		common-- // the last token must go through the model for its logits
	}
	if drop := len(s.tokens) - common; drop > 0 {
		trimmed := true
		for _, c := range s.caches {
			if !c.Trimmable() {
				trimmed = false
			}
		}
		if trimmed {
			for _, c := range s.caches {
				c.Trim(drop)
			}
			s.tokens = s.tokens[:common]
		} else {
			s.Reset()
			common = 0
		}
	}
	return s.generate(ctx, common, ids[common:], opts, onText)
}

// generate runs prompt (the tokens after the cached ones) and records what
// the caches hold afterwards.
func (s *Session) generate(ctx context.Context, cached int, prompt []int32, opts Options, onText func(string) error) (Result, error) {
	if s.m.Tokenizer == nil {
		return Result{}, ErrNoTokenizer
	}
	stops := append(slices.Clone(s.m.StopTokens), opts.ExtraStopTokens...)
	var draft generate.Model
	var dcaches []kv.Cache
	if opts.Draft != nil {
		if s.draft != opts.Draft { // checked once per draft model
			if err := s.m.CheckDraft(opts.Draft); err != nil {
				return Result{}, err
			}
		}
		var err error
		if dcaches, err = s.draftCaches(opts.Draft, cached); err != nil {
			return Result{}, err
		}
		draft = opts.Draft.Net
	}
	rec := &recorder{d: s.m.Tokenizer.NewStream(true)}
	to := generate.TextOptions{
		Options: generate.Options{
			Sampling:    opts.Sampling,
			MaxTokens:   opts.MaxTokens,
			StopTokens:  stops,
			PrefillStep: opts.PrefillStep,
			Caches:      s.caches,
			MemoryLimit: opts.MemoryLimit,
			OnPrompt:    opts.OnPrompt,
			Constraint:  opts.Constraint,
			Draft:       draft,
			NumDraft:    opts.NumDraft,
			DraftCaches: dcaches,
			Lookup:      opts.Lookup,
		},
		StopStrings: opts.StopStrings,
		OnText:      onText,
	}
	text, st, err := generate.Text(ctx, s.m.Net, prompt, rec, to)
	res := Result{Text: text, Finish: st.Finish, PromptTokens: cached + len(prompt), CachedTokens: cached, Tokens: st.Tokens, Stats: st}
	if !s.opaque {
		known := append(s.tokens, prompt...)
		known = append(known, rec.ids...)
		if st.StopToken >= 0 {
			known = append(known, st.StopToken)
		}
		if n := s.Cached(); n <= len(known) {
			s.tokens = known[:n]
		} else {
			s.Reset()
		}
	}
	return res, err
}

// recorder passes tokens to a detokenizer and keeps their ids.
type recorder struct {
	d   generate.Detokenizer
	ids []int32
}

func (r *recorder) Step(id int32) string { r.ids = append(r.ids, id); return r.d.Step(id) }
func (r *recorder) Flush() string        { return r.d.Flush() }

// tokensKey is the metadata key under which Save lists the cached ids.
const tokensKey = "archgen_tokens"

// Save writes the session's caches to path in mlx-lm's prompt-cache format
// (mlx_lm.generate --prompt-cache-file reads it), with the metadata mlx-lm
// writes (model, tokenizer_config), the ids the caches hold, and meta.
func (s *Session) Save(path string, meta map[string]string) error {
	md := map[string]string{"model": s.m.Source.Path, "tokenizer_config": "{}"}
	for k, v := range meta {
		md[k] = v
	}
	if !s.opaque {
		b, _ := json.Marshal(s.tokens)
		md[tokensKey] = string(b)
	}
	return kv.Save(path, s.caches, md)
}

// Load replaces the session's caches with those of a prompt-cache file
// (written by Save, or by mlx_lm.cache_prompt) and returns its metadata.
// A file without the ids of its tokens (mlx-lm's) can only be continued
// with Append.
func (s *Session) Load(path string) (map[string]string, error) {
	caches, meta, err := kv.Load(path)
	if err != nil {
		return nil, err
	}
	// as many caches as the model keeps (a model's feed-forward-only layers
	// keep none)
	if want := len(s.m.Net.NewCaches()); len(caches) != want {
		for _, c := range caches {
			c.Free()
		}
		return nil, fmt.Errorf("%s: holds %d caches, the model keeps %d: the file was made with another model (%s)",
			path, len(caches), want, meta["model"])
	}
	var tokens []int32
	opaque := true
	if raw, ok := meta[tokensKey]; ok {
		if err := json.Unmarshal([]byte(raw), &tokens); err != nil || len(tokens) != caches[0].Offset() {
			for _, c := range caches {
				c.Free()
			}
			return nil, fmt.Errorf("%s: metadata %s does not list the %d tokens the caches hold", path, tokensKey, caches[0].Offset())
		}
		opaque = false
	}
	s.Free()
	s.caches, s.tokens, s.opaque = caches, tokens, opaque
	delete(meta, tokensKey)
	return meta, nil
}
