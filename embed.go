package archgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Pooling names for EmbedOptions.Pooling.
const (
	// PoolLast is the hidden state of an input's last token: the one that
	// has attended to every other, as Qwen3-Embedding and other embedding
	// models built on decoders read it.
	PoolLast = "last"
	// PoolMean is the mean of the hidden states of all of an input's
	// tokens, the special tokens the tokenizer adds included.
	PoolMean = "mean"
	// PoolCLS is the hidden state of an input's first token (BERT's [CLS]),
	// which in an encoder has attended to every other.
	PoolCLS = "cls"
)

// Poolings are the pooling names Embed takes.
var Poolings = []string{PoolLast, PoolMean, PoolCLS}

// EmbedOptions are the knobs of Embed.
type EmbedOptions struct {
	// Pooling makes one vector of an input's hidden states: PoolLast,
	// PoolMean or PoolCLS. "" is the model's default: PoolLast for a
	// decoder, the descriptor's pooling for an encoder (mean for BERT).
	Pooling string
	// NoNormalize leaves the pooled vectors as they are; by default each
	// is scaled to unit length (L2), so that a dot product is the cosine
	// similarity.
	NoNormalize bool
	// Dimensions, when above 0, keeps each vector's first Dimensions
	// values (a Matryoshka truncation), then normalizes what is kept
	// (unless NoNormalize). At most the vector's size (the model's hidden
	// size, or the last Dense module's output).
	Dimensions int
	// Dense are sentence-transformers Dense modules run on each pooled
	// vector in order, before the truncation and normalization
	// (EmbedDefaults reads them from the folder).
	Dense []Dense
	// PrefillStep is how many tokens go through the model at once
	// (default 2048): longer inputs run in chunks over a KV cache, and
	// shorter ones together up to that many, padding included, which
	// bounds the memory of their activations. An encoder reads each input
	// whole, so a longer input runs alone in one step.
	PrefillStep int
}

// VectorSize is the size of the vectors Embed gives before any truncation:
// the last Dense module's output, or the model's hidden size.
func (o EmbedOptions) VectorSize(hidden int) int {
	if n := len(o.Dense); n > 0 {
		return o.Dense[n-1].Out
	}
	return hidden
}

// EmbedInputError is Embed's refusal of one of its inputs.
type EmbedInputError struct {
	Index int // the input's place in the list
	// Tokens is its length, and Context the model's context where the
	// input is longer than it (0 otherwise).
	Tokens, Context int
	Msg             string
}

func (e *EmbedInputError) Error() string { return fmt.Sprintf("input[%d]: %s", e.Index, e.Msg) }

// Embed is one vector for each input: the model's final hidden states
// (the output of its final norm, which the head reads; nn.Model's Hidden)
// pooled over the input's tokens, as llama.cpp's `llama-server
// --embeddings --pooling last|mean|cls` gives them for a generative model,
// and as sentence-transformers gives them for an encoder (BERT and its
// kin: every position attends to every other).
//
// Each input is encoded as plain text with the tokenizer's special tokens
// added as Encode adds them (a BOS where the tokenizer's post-processor
// puts one). Inputs run together where they fit: in order of length, as
// many as fit PrefillStep tokens, each padded after its end to the longest,
// go through the model as one batch from fresh caches (a decoder is
// causal, so the padding changes none of an input's states; an encoder's
// attention masks each row's padding); an input longer than half of
// PrefillStep runs alone, in chunks (an encoder's whole). A vector may
// differ from the input's alone in the last float32 places (kernels block
// their sums by rows). No state is kept between calls. An input with no tokens or
// with more than the model's context (ContextLength) is refused with an
// *EmbedInputError naming its index, before any input runs. ctx is checked
// between inputs and between an input's chunks.
//
// The pooling is by default PoolLast: a decoder's last position is the
// only one that has seen the whole input, which is how embedding models
// made of decoders (Qwen3-Embedding, e5-mistral) are read; PoolMean
// averages every position instead (llama-server's --pooling mean), and
// PoolCLS takes the first. An encoder pools by its descriptor's default
// (BERT's: mean); a checkpoint's sentence-transformers folder says its own
// (EmbedDefaults), which callers pass on.
func (m *Model) Embed(ctx context.Context, inputs []string, opts EmbedOptions) ([][]float32, error) {
	if m.Tokenizer == nil {
		return nil, ErrNoTokenizer
	}
	ids := make([][]int32, len(inputs))
	for i, s := range inputs {
		ids[i], _ = m.EncodeEmbedInput(s)
	}
	return m.EmbedTokens(ctx, ids, opts)
}

// EncodeEmbedInput is the token ids Embed runs for text: the text encoded
// with the tokenizer's special tokens added, as Encode adds them.
func (m *Model) EncodeEmbedInput(text string) ([]int32, error) {
	if m.Tokenizer == nil {
		return nil, ErrNoTokenizer
	}
	return m.Tokenizer.Encode(text, true), nil
}

// EmbedTokens is Embed on inputs already encoded as token ids; an id
// outside the vocabulary is refused with an *EmbedInputError too.
func (m *Model) EmbedTokens(ctx context.Context, inputs [][]int32, opts EmbedOptions) ([][]float32, error) {
	info := m.Net.Info()
	if err := opts.check(info); err != nil {
		return nil, err
	}
	limit := m.ContextLength()
	for i, in := range inputs {
		if err := checkInput(i, in, limit, info.VocabSize); err != nil {
			return nil, err
		}
	}
	pooled := make([][]float64, len(inputs))
	for _, pack := range packs(inputs, opts.PrefillStep) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(pack) == 1 && !info.Encoder {
			i := pack[0]
			v, err := m.pool(ctx, inputs[i], opts)
			if err != nil {
				return nil, fmt.Errorf("input[%d]: %w", i, err)
			}
			pooled[i] = v
			continue
		}
		vs, err := m.poolPack(inputs, pack, opts.Pooling)
		if err != nil {
			return nil, fmt.Errorf("inputs %v: %w", pack, err)
		}
		for k, i := range pack {
			pooled[i] = vs[k]
		}
	}
	pooled, err := applyDense(pooled, opts.Dense)
	if err != nil {
		return nil, fmt.Errorf("embed: the Dense modules: %w", err)
	}
	out := make([][]float32, len(inputs))
	for i, v := range pooled {
		out[i] = finish(v, opts)
	}
	return out, nil
}

// packs groups the inputs (by index) that run through the model together:
// in order of length, as many as fit step tokens with each padded to the
// longest among them. An input longer than half of step runs alone (in
// chunks of step when longer than that).
func packs(inputs [][]int32, step int) [][]int {
	order := make([]int, len(inputs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(inputs[a]) - len(inputs[b]) })
	var out [][]int
	for len(order) > 0 {
		n := 1
		for n < len(order) && (n+1)*len(inputs[order[n]]) <= step {
			n++
		}
		out = append(out, order[:n:n])
		order = order[n:]
	}
	return out
}

func (o *EmbedOptions) check(info nn.Info) error {
	switch {
	case o.Pooling == "" && info.Pooling != "":
		o.Pooling = info.Pooling
	case o.Pooling == "":
		o.Pooling = PoolLast
	case !slices.Contains(Poolings, o.Pooling):
		return fmt.Errorf("embed: pooling %q: want one of %q", o.Pooling, Poolings)
	}
	width := info.Hidden
	for i, d := range o.Dense {
		if d.In != width || len(d.Weight) != d.In*d.Out || (d.Bias != nil && len(d.Bias) != d.Out) {
			return fmt.Errorf("embed: Dense module %d takes %d values (weights %d, bias %d for %d outputs); the vectors before it have %d", i, d.In, len(d.Weight), len(d.Bias), d.Out, width)
		}
		width = d.Out
	}
	if o.Dimensions < 0 || o.Dimensions > width {
		return fmt.Errorf("embed: dimensions %d: want 1 to the vectors' size, %d (0: all)", o.Dimensions, width)
	}
	if o.PrefillStep <= 0 {
		o.PrefillStep = 2048
	}
	return nil
}

func checkInput(i int, in []int32, limit, vocab int) error {
	if len(in) == 0 {
		return &EmbedInputError{Index: i, Msg: "no tokens: an input needs at least one"}
	}
	if limit > 0 && len(in) > limit {
		return &EmbedInputError{Index: i, Tokens: len(in), Context: limit,
			Msg: fmt.Sprintf("%d tokens, more than the model's context of %d", len(in), limit)}
	}
	for p, t := range in {
		if t < 0 || int(t) >= vocab {
			return &EmbedInputError{Index: i, Tokens: len(in),
				Msg: fmt.Sprintf("token %d (position %d) is outside the vocabulary of %d", t, p, vocab)}
		}
	}
	return nil
}

// pool runs one input through the model in chunks of opts.PrefillStep and
// returns its pooled hidden state, in float64.
func (m *Model) pool(ctx context.Context, tokens []int32, opts EmbedOptions) ([]float64, error) {
	caches := m.Net.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	if opts.Pooling == PoolCLS {
		// A causal model's first state reads the first token alone.
		tokens = tokens[:1]
	}
	var sum []float64
	for start := 0; start < len(tokens); start += opts.PrefillStep {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := tokens[start:min(start+opts.PrefillStep, len(tokens))]
		last := start+len(chunk) == len(tokens)
		if opts.Pooling == PoolLast && !last {
			if err := m.prefill(chunk, 1, caches, nil); err != nil {
				return nil, err
			}
			continue
		}
		row, err := m.chunkPool(chunk, caches, opts.Pooling)
		if err != nil {
			return nil, err
		}
		if sum == nil {
			sum = make([]float64, len(row))
		}
		for j, x := range row {
			sum[j] += float64(x)
		}
	}
	if opts.Pooling == PoolMean {
		for j := range sum {
			sum[j] /= float64(len(tokens))
		}
	}
	return sum, nil
}

// poolPack runs the inputs pack (indices into inputs) through the model at
// once, each a row padded after its end to the longest, from fresh caches,
// and returns each one's pooled hidden state, in float64. The models are
// causal, so what follows an input's end (the padding) changes none of its
// positions' states.
func (m *Model) poolPack(inputs [][]int32, pack []int, pooling string) ([][]float64, error) {
	B, L := len(pack), 0
	for _, i := range pack {
		L = max(L, len(inputs[i]))
	}
	tokens := make([]int32, B*L) // padded with token 0
	valid := make([]bool, B*L)
	last := make([]int32, B)
	lengths := make([]int, B)
	for r, i := range pack {
		copy(tokens[r*L:], inputs[i])
		for t := range inputs[i] {
			valid[r*L+t] = true
		}
		last[r] = int32(len(inputs[i]) - 1)
		lengths[r] = len(inputs[i])
	}
	if pooling == PoolCLS {
		clear(last)
	}
	caches := m.packCaches(lengths, nil)
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	var rows *mlx.Array
	err := m.prefill(tokens, B, caches, func(g *mlx.Graph, h *mlx.Array) *mlx.Array {
		h = g.AsType(h, mlx.Float32) // [B, L, hidden]
		d := h.Dim(2)
		if pooling == PoolMean {
			keep := mlx.FromSlice(g, valid, B, L, 1)
			rows = g.Sum(g.Where(keep, h, g.Scalar(0, mlx.Float32)), false, 1) // [B, hidden]
		} else {
			at := g.BroadcastTo(mlx.FromSlice(g, last, B, 1, 1), B, 1, d)
			rows = g.Reshape(g.TakeAlongAxis(h, at, 1), B, d)
		}
		return rows
	})
	if err != nil {
		return nil, err
	}
	defer rows.Free()
	vals, err := rows.Float32s()
	if err != nil {
		return nil, err
	}
	d := len(vals) / B
	out := make([][]float64, B)
	for r, i := range pack {
		out[r] = make([]float64, d)
		for j, x := range vals[r*d : (r+1)*d] {
			out[r][j] = float64(x)
			if pooling == PoolMean {
				out[r][j] /= float64(len(inputs[i]))
			}
		}
	}
	return out, nil
}

// packCaches are the caches a batch of rows of the given lengths, padded
// after their ends, runs on from fresh: an encoder's masks each row's
// padding (and carries the tokens' types, nil for all 0); a decoder's are
// its usual ones, since its padding, after an input's end, changes none of
// the input's states.
func (m *Model) packCaches(lengths []int, types []int32) []kv.Cache {
	if !m.Net.Info().Encoder {
		return m.Net.NewCaches()
	}
	caches := m.Net.NewCaches()
	e := kv.NewEncoding(lengths, types)
	for i := range caches {
		caches[i] = e
	}
	return caches
}

// chunkPool runs chunk through the model over caches and returns the sum
// of its hidden states (PoolMean) or its last one (PoolLast), in float32.
func (m *Model) chunkPool(chunk []int32, caches []kv.Cache, pooling string) ([]float32, error) {
	var row *mlx.Array
	err := m.prefill(chunk, 1, caches, func(g *mlx.Graph, h *mlx.Array) *mlx.Array {
		h = g.AsType(h, mlx.Float32) // [1, L, hidden]
		n, d := h.Dim(1), h.Dim(2)
		switch pooling {
		case PoolMean:
			row = g.Sum(h, false, 0, 1) // [hidden]
		case PoolCLS:
			row = g.Reshape(g.Slice(h, []int{0, 0, 0}, []int{1, 1, d}), d)
		default:
			row = g.Reshape(g.Slice(h, []int{0, n - 1, 0}, []int{1, n, d}), d)
		}
		return row
	})
	if err != nil {
		return nil, err
	}
	defer row.Free()
	return row.Float32s()
}

// prefill runs chunk (rows rows of tokens) through the model's hidden
// states over caches, evaluating what out makes of them (nil: the caches
// alone). The graph is closed before evaluating, as generation's prefill
// does, so that MLX frees each activation once it is used.
func (m *Model) prefill(chunk []int32, rows int, caches []kv.Cache, out func(*mlx.Graph, *mlx.Array) *mlx.Array) error {
	g := mlx.NewGraph(nil)
	defer g.Close()
	x := mlx.FromSlice(g, chunk, rows, len(chunk)/rows)
	h := m.Net.Hidden(g, x, caches)
	var more []*mlx.Array
	if out != nil {
		r := out(g, h)
		g.Keep(r)
		more = append(more, r)
	}
	if err := g.Err(); err != nil {
		for _, a := range more {
			a.Free()
		}
		return err
	}
	g.Close()
	if err := kv.EvalLayers(caches, more...); err != nil {
		for _, a := range more {
			a.Free()
		}
		return err
	}
	mlx.ClearCache()
	return nil
}

// finish truncates v to opts.Dimensions and normalizes it as opts say.
func finish(v []float64, opts EmbedOptions) []float32 {
	if opts.Dimensions > 0 {
		v = v[:opts.Dimensions]
	}
	scale := 1.0
	if !opts.NoNormalize {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		if ss > 0 {
			scale = 1 / math.Sqrt(ss)
		}
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x * scale)
	}
	return out
}

// ContextLength is the model's context in tokens: for an encoder with a
// learned position table, the longest input the table takes (nn.Info's
// MaxInput: RoBERTa's 514 rows hold 512 tokens); else config.json's
// max_position_embeddings for a model directory, else the tokenizer's
// model_max_length (which a GGUF file's context_length sets); 0 when
// neither says.
func (m *Model) ContextLength() int {
	if n := m.Net.Info().MaxInput; n > 0 {
		return n
	}
	if m.Source.Kind == KindDir {
		if data, err := os.ReadFile(filepath.Join(m.Source.Path, "config.json")); err == nil {
			var cfg struct {
				N int `json:"max_position_embeddings"`
			}
			if json.Unmarshal(data, &cfg) == nil && cfg.N > 0 {
				return cfg.N
			}
		}
	}
	if m.Tokenizer != nil {
		if n := m.Tokenizer.Config.ModelMaxLength; n > 0 && n < 1<<31 {
			return int(n)
		}
	}
	return 0
}
