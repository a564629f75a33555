package archgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// ErrNoClassifier is the refusal to score with a model that has no
// classifier head: a decoder, or an encoder checkpoint made for embeddings
// (BertModel) rather than for scoring pairs (BertForSequenceClassification).
var ErrNoClassifier = errors.New("the model has no classifier head to score with: rerank needs a cross-encoder (an encoder checkpoint with a classifier, such as BertForSequenceClassification)")

// Labels is the number of scores the model's classifier gives an input; 0
// where it has none (see ErrNoClassifier).
func (m *Model) Labels() int {
	if s, ok := m.Net.(nn.Scorer); ok {
		return s.Labels()
	}
	return 0
}

// ScoreTokens runs a cross-encoder's classifier on inputs already encoded
// (a pair of texts each, as EncodePair gives them): each input's token ids
// and their types (the segment each token belongs to; nil: all 0), and
// returns each input's scores, one per label, as the classifier gives
// them (logits, before any sigmoid or softmax). Inputs run together as
// Embed's do: in order of length, as many as fit PrefillStep tokens (2048),
// each padded after its end and its padding masked. An input with no
// tokens, more than the model's context, an id outside the vocabulary or
// types of another length is refused with an *EmbedInputError naming its
// index, before any input runs.
func (m *Model) ScoreTokens(ctx context.Context, inputs, types [][]int32) ([][]float32, error) {
	s, ok := m.Net.(nn.Scorer)
	if !ok || s.Labels() == 0 {
		return nil, ErrNoClassifier
	}
	info := m.Net.Info()
	limit := m.ContextLength()
	if types != nil && len(types) != len(inputs) {
		return nil, fmt.Errorf("score: %d inputs and %d lists of token types", len(inputs), len(types))
	}
	for i, in := range inputs {
		if err := checkInput(i, in, limit, info.VocabSize); err != nil {
			return nil, err
		}
		if types != nil && len(types[i]) != len(in) {
			return nil, &EmbedInputError{Index: i, Tokens: len(in), Msg: fmt.Sprintf("%d token types for %d tokens", len(types[i]), len(in))}
		}
	}
	out := make([][]float32, len(inputs))
	for _, pack := range packs(inputs, 2048) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		scores, err := m.scorePack(s, inputs, types, pack)
		if err != nil {
			return nil, fmt.Errorf("inputs %v: %w", pack, err)
		}
		for k, i := range pack {
			out[i] = scores[k]
		}
	}
	return out, nil
}

// scorePack scores the inputs pack (indices into inputs) as one batch.
func (m *Model) scorePack(s nn.Scorer, inputs, types [][]int32, pack []int) ([][]float32, error) {
	B, L := len(pack), 0
	for _, i := range pack {
		L = max(L, len(inputs[i]))
	}
	tokens := make([]int32, B*L) // padded with token 0, of type 0
	var tt []int32
	if types != nil {
		tt = make([]int32, B*L)
	}
	lengths := make([]int, B)
	for r, i := range pack {
		copy(tokens[r*L:], inputs[i])
		if types != nil {
			copy(tt[r*L:], types[i])
		}
		lengths[r] = len(inputs[i])
	}
	caches := m.packCaches(lengths, tt)
	var scores *mlx.Array
	err := m.prefill(tokens, B, caches, func(g *mlx.Graph, h *mlx.Array) *mlx.Array {
		scores = s.Score(g, h, lengths) // [B, labels]
		return scores
	})
	if err != nil {
		return nil, err
	}
	defer scores.Free()
	vals, err := scores.Float32s()
	if err != nil {
		return nil, err
	}
	n := len(vals) / B
	out := make([][]float32, B)
	for r := range out {
		out[r] = vals[r*n : (r+1)*n]
	}
	return out, nil
}

// RerankOptions are the knobs of Rerank.
type RerankOptions struct {
	// RawScores gives the classifier's logits as they are. By default each
	// is turned into a relevance as sentence-transformers' CrossEncoder
	// does for the checkpoint: through a sigmoid, unless its config.json
	// names another activation (sbert_ce_default_activation_function:
	// Identity keeps the logit, as cross-encoder/ms-marco-MiniLM's asks).
	RawScores bool
}

// Rerank is a cross-encoder's relevance of each document to query, in the
// documents' order: each (query, document) pair is encoded as the
// tokenizer's pair template says ([CLS] query [SEP] document [SEP], the
// document's tokens of type 1, for BERT) and scored by the classifier
// (ScoreTokens), whose one score per pair becomes a relevance as opts say;
// tokens is the pairs' length in all. A model without a classifier is refused with ErrNoClassifier, one with
// more than one label too (it classifies, it does not rank); a pair over
// the model's context is refused with an *EmbedInputError naming the
// document's index.
func (m *Model) Rerank(ctx context.Context, query string, documents []string, opts RerankOptions) (scores []float64, tokens int, err error) {
	if n := m.Labels(); n != 1 {
		if n == 0 {
			return nil, 0, ErrNoClassifier
		}
		return nil, 0, fmt.Errorf("rerank: the model's classifier gives %d scores per pair (a classifier of %d labels); a reranker gives one", n, n)
	}
	if m.Tokenizer == nil {
		return nil, 0, ErrNoTokenizer
	}
	ids := make([][]int32, len(documents))
	types := make([][]int32, len(documents))
	for i, d := range documents {
		ids[i], types[i] = m.Tokenizer.EncodePair(query, d, true)
		tokens += len(ids[i])
	}
	logits, err := m.ScoreTokens(ctx, ids, types)
	if err != nil {
		return nil, 0, err
	}
	identity := opts.RawScores || m.rerankActivation() == "identity"
	scores = make([]float64, len(logits))
	for i, s := range logits {
		scores[i] = float64(s[0])
		if !identity {
			scores[i] = 1 / (1 + math.Exp(-scores[i]))
		}
	}
	return scores, tokens, nil
}

// rerankActivation is the activation a cross-encoder's config.json names
// for its scores, as sentence-transformers writes it (before version 4:
// sbert_ce_default_activation_function; since: sentence_transformers.
// activation_fn): "identity" for torch.nn.modules.linear.Identity, else
// "sigmoid" (also where it names none, sentence-transformers' default for
// one label).
func (m *Model) rerankActivation() string {
	if m.Source.Kind != KindDir {
		return "sigmoid"
	}
	data, err := os.ReadFile(filepath.Join(m.Source.Path, "config.json"))
	if err != nil {
		return "sigmoid"
	}
	var cfg struct {
		Act string `json:"sbert_ce_default_activation_function"`
		ST  struct {
			Act string `json:"activation_fn"`
		} `json:"sentence_transformers"`
	}
	if json.Unmarshal(data, &cfg) == nil && (strings.HasSuffix(cfg.Act, ".Identity") || strings.HasSuffix(cfg.ST.Act, ".Identity")) {
		return "identity"
	}
	return "sigmoid"
}
