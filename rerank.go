package archgen

import (
	"context"
	"errors"
	"fmt"

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
		scores = s.Score(g, h) // [B, labels]
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
