// Package archgen is the package a Go program imports to run a language
// model: Load a checkpoint, then Chat with it or Generate from a prompt,
// text streaming to a callback as it comes.
//
//	m, err := archgen.Load(ctx, "HuggingFaceTB/SmolLM2-135M-Instruct", archgen.LoadOptions{})
//	if err != nil { ... }
//	defer m.Free()
//	res, err := m.Chat(ctx, []archgen.Message{{Role: "user", Content: "Hi!"}},
//		archgen.Options{MaxTokens: 100}, func(s string) error { fmt.Print(s); return nil })
//
// It sits at the module's root so that the import path is the project's
// name and the first thing a user finds; the packages under it are the
// parts it puts together, for a program that needs one of them alone:
// generated/registry (every architecture, loaded from a model directory),
// gguf (llama.cpp checkpoints), tokenizer and tokenizer/chat (tokens and
// chat templates), generate (sampling and the decode loop) and runtime/kv
// (KV caches and prompt-cache files).
//
// # Loading
//
// Load takes a model directory as mlx-lm saves one (config.json, its
// safetensors, tokenizer.json and tokenizer_config.json), a llama.cpp GGUF
// file, or a Hugging Face repo id or cache folder, found offline in the
// Hugging Face cache (see Resolve and HubCache); with
// LoadOptions.Download, a repo id the cache lacks is first downloaded into
// it from the Hub (package hub). The Model it returns holds the forward
// pass, the tokenizer, the chat template and the stop set (StopTokens),
// which merges config.json's and generation_config.json's eos_token_id
// with the tokenizer's as mlx-lm does. The tokenizer is read before the
// weights, so a checkpoint without one fails at once.
//
// # Generating
//
// Chat renders messages with the model's chat template (adding the opening
// of the assistant's turn) and encodes the result without adding special
// tokens again, so a BOS the template writes is not doubled. Generate
// encodes a prompt as it is, adding the tokenizer's special tokens unless
// the prompt already starts with the BOS token. Both stream text to onText
// in pieces that never split a character or end inside a stop string, and
// return the Result: the text, why generation ended and the token counts.
//
// A Session keeps a conversation's KV cache between calls: each Chat on it
// processes only the tokens the cache does not hold yet. Sessions save and
// load their cache in mlx-lm's prompt-cache format.
//
// Sampling is greedy unless Options.Temp is set; a sampled generation is
// reproducible through Options.Seed, which equals mlx-lm's mx.random.seed.
//
// Programs outside this module build with cgo against libmlx; the README's
// "Using archgen from another module" shows the go.mod replace directive
// and the flags.
package archgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/hub"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/chat"
)

// Message is one turn of a conversation: Role ("system", "user",
// "assistant", ...) and Content.
type Message = chat.Message

// LoadOptions are the knobs of Load.
type LoadOptions struct {
	// Options are the weights' options: compute dtype (float32 on the CPU
	// by default, half-precision weights kept as stored; nn.CheckpointDtype
	// computes as mlx-lm does, in the checkpoint's own dtypes), stream, a
	// progress callback, a memory limit.
	nn.Options
	// NoTokenizer loads the weights alone, for a checkpoint without a
	// tokenizer (Chat and Generate then fail; the forward pass runs).
	NoTokenizer bool
	// TemplateBounds bound each render of the checkpoint's chat template,
	// which runs in a renderer process of its own (chat.CompileBounded);
	// zero fields take chat.DefaultBounds.
	TemplateBounds chat.Bounds
	// TrustTemplate renders the chat template in this process with no
	// bound on its work, for a template the caller wrote or checked.
	TrustTemplate bool
	// ChatTemplate, when set, is the chat template (Jinja source) used
	// instead of the checkpoint's own; ChatTemplateSource names where it
	// came from, for errors.
	ChatTemplate, ChatTemplateSource string
	// Download lets Load fetch a Hugging Face repo id (ORG/NAME, or
	// ORG/NAME@REVISION) that the cache lacks, or holds in part, from the
	// Hub into the cache (hub.Download) before loading it. A repo the
	// cache holds loads from it without the network, as without Download.
	Download bool
	// Hub are the download's options: the token, the endpoint, the files
	// (a model's, hub.ModelFiles, by default), a progress callback; zero
	// fields take hub.Download's defaults (HF_TOKEN, HF_ENDPOINT, ...).
	// Its Revision is the one a repo id without @REVISION names, and its
	// CacheDir the cache repo ids are read from (HubCache when empty),
	// with Download or without.
	Hub hub.Options
}

// Model is a loaded checkpoint with what generation needs around it. Its
// methods may be called from several goroutines at once; each call has
// caches of its own.
type Model struct {
	// Net is the generated forward pass.
	Net nn.Model
	// Tokenizer is the checkpoint's tokenizer (nil with NoTokenizer).
	Tokenizer *tokenizer.Pretrained
	// Template is the chat template, nil when the tokenizer has none.
	Template *chat.Template
	// StopTokens end a turn: see StopTokens.
	StopTokens []int32
	// Source is what the path given to Load resolved to.
	Source Resolved
	// ggufPooling is the pooling a GGUF file names for its embeddings ("":
	// none, or not a GGUF file).
	ggufPooling string
}

// Free releases the weights.
func (m *Model) Free() {
	if m.Net != nil {
		m.Net.Free()
	}
}

// Load resolves path (see Resolve; with opts.Download, a repo id the
// cache lacks is downloaded first), reads the tokenizer and the chat
// template, then the weights. ctx is checked before the weights are read,
// and cancels a download.
func Load(ctx context.Context, path string, opts LoadOptions) (*Model, error) {
	src, err := resolveForLoad(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	m := &Model{Source: src}
	switch src.Kind {
	case KindGGUF:
		err = m.loadGGUF(ctx, opts)
	default:
		err = m.loadDir(ctx, opts)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Model) loadDir(ctx context.Context, opts LoadOptions) error {
	dir := m.Source.Path
	eos := int32(-1)
	if !opts.NoTokenizer {
		tj := filepath.Join(dir, "tokenizer.json")
		if _, err := os.Stat(tj); err != nil {
			return fmt.Errorf("%s: no tokenizer.json: archgen reads the tokenizer from tokenizer.json (tokenizer.model alone is not enough); copy it from the checkpoint's repo, or convert the model with mlx_lm.convert, which writes it", dir)
		}
		tok, err := tokenizer.Load(dir)
		if err != nil {
			return err
		}
		if err := m.setTokenizer(tok, opts); err != nil {
			return err
		}
		eos = tok.EOS
	}
	stops, err := dirStopTokens(dir, eos)
	if err != nil {
		return err
	}
	m.StopTokens = stops
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Net, err = registry.Load(dir, opts.Options); err != nil {
		return err
	}
	return nil
}

func (m *Model) loadGGUF(ctx context.Context, opts LoadOptions) error {
	g, err := gguf.Read(m.Source.Path, opts.Stream, registry.Archs())
	if err != nil {
		return err
	}
	eos := int32(-1)
	if !opts.NoTokenizer {
		tok, err := g.Tokenizer()
		if err != nil {
			g.Free()
			return err
		}
		if err := m.setTokenizer(tok, opts); err != nil {
			g.Free()
			return err
		}
		eos = tok.EOS
	}
	var config []byte
	if id, ok := g.Config["eos_token_id"]; ok {
		config = fmt.Appendf(nil, `{"eos_token_id": %v}`, id)
	}
	if m.StopTokens, err = StopTokens(config, nil, eos); err != nil {
		g.Free()
		return fmt.Errorf("%s: %w", m.Source.Path, err)
	}
	if err := ctx.Err(); err != nil {
		g.Free()
		return err
	}
	m.ggufPooling = g.Pooling
	if m.Net, err = g.Load(opts.Options, registry.Load); err != nil {
		return err
	}
	return nil
}

func (m *Model) setTokenizer(tok *tokenizer.Pretrained, opts LoadOptions) error {
	m.Tokenizer = tok
	if opts.ChatTemplate != "" {
		tok.Config.ChatTemplate, tok.Config.ChatTemplateSource = opts.ChatTemplate, opts.ChatTemplateSource
		if tok.Config.ChatTemplateSource == "" {
			tok.Config.ChatTemplateSource = "LoadOptions.ChatTemplate"
		}
	}
	if tok.Config.ChatTemplate == "" {
		return nil
	}
	name := tok.Config.ChatTemplateSource
	if name == "" {
		name = m.Source.Path
	}
	var t *chat.Template
	var err error
	if opts.TrustTemplate {
		t, err = chat.Compile(tok.Config.ChatTemplate)
	} else {
		t, err = chat.CompileBounded(name, tok.Config.ChatTemplate, opts.TemplateBounds)
	}
	var be *chat.BoundError
	if errors.As(err, &be) {
		return err // it names the template
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	m.Template = t
	return nil
}

// ErrNoTemplate is Chat's error for a tokenizer without a chat template.
var ErrNoTemplate = errors.New("the tokenizer has no chat template")

// ErrNoTokenizer is the error of Chat and Generate on a model loaded with
// NoTokenizer.
var ErrNoTokenizer = errors.New("the model was loaded without its tokenizer")

// CheckGenerative refuses an encoder (structure.encoder: BERT and its
// kin), which embeds and scores pairs but has no head to predict tokens
// with, naming what it does instead.
func (m *Model) CheckGenerative() error {
	if info := m.Net.Info(); info.Encoder {
		return fmt.Errorf("%w: %s (%s) embeds (Embed, archrun embed, /v1/embeddings) and scores pairs with a classifier (Rerank, /v1/rerank), it does not generate", ErrEncoder, m.Source.Path, info.Arch)
	}
	return nil
}

// ErrEncoder is the refusal to generate with an encoder.
var ErrEncoder = errors.New("the model is an encoder")
