package parity

import (
	"fmt"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
)

// Model is what the runs below need of a loaded model: the forward pass
// over tokens [B, L] with per-layer caches, returning logits [B, L, vocab],
// and the empty caches a sequence starts with.
type Model interface {
	Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
	NewCaches() []kv.Cache
}

// Prefill runs the prompt through m in one call with fresh caches and
// returns its logits as float32, [len(prompt), vocab] in row order.
func Prefill(m Model, prompt []int32) ([]float32, int, error) {
	if len(prompt) == 0 {
		return nil, 0, fmt.Errorf("empty prompt")
	}
	caches := m.NewCaches()
	defer freeCaches(caches)
	return forward(m, prompt, caches)
}

// Greedy decodes n tokens after prompt, picking the first largest logit
// at each step, with the model calls chunked as calls says: the token count
// of each call, the prompt's first (refs.json's decode_calls, mlx-lm's
// generate_step chunking: all but the last prompt token, then one token at
// a time). A nil calls means the whole prompt in one call, then one token
// at a time. It returns the picks and, row by row, the logits each pick was
// made from ([n, vocab]).
//
// With force non-nil (n tokens), step i feeds force[i] instead of its own
// pick, so every step sees the reference's history: the picks then equal a
// free-running decode's exactly when they equal force at every step, and a
// mismatch names the one step that differs instead of derailing the rest.
func Greedy(m Model, prompt []int32, calls []int, n int, force []int32) ([]int32, []float32, error) {
	caches := m.NewCaches()
	defer freeCaches(caches)
	return greedy(m, caches, prompt, calls, n, force)
}

// greedy is Greedy over the given empty caches.
func greedy(m Model, caches []kv.Cache, prompt []int32, calls []int, n int, force []int32) ([]int32, []float32, error) {
	if len(prompt) == 0 || n <= 0 {
		return nil, nil, fmt.Errorf("greedy needs a prompt and n > 0 (got %d tokens, n %d)", len(prompt), n)
	}
	if force != nil && len(force) != n {
		return nil, nil, fmt.Errorf("%d forced tokens for %d steps", len(force), n)
	}
	if calls == nil {
		calls = []int{len(prompt)}
		for i := 1; i < n; i++ {
			calls = append(calls, 1)
		}
	}
	var picks []int32
	var rows []float32
	pos := 0
	for _, c := range calls {
		if len(picks) == n {
			break
		}
		var in []int32
		switch {
		case pos < len(prompt) && pos+c <= len(prompt):
			in = prompt[pos : pos+c]
		case pos >= len(prompt) && c == 1 && force != nil:
			in = force[len(picks)-1 : len(picks)]
		case pos >= len(prompt) && c == 1:
			in = picks[len(picks)-1:]
		default:
			return nil, nil, fmt.Errorf("a call of %d tokens at position %d crosses the end of the %d-token prompt", c, pos, len(prompt))
		}
		logits, vocab, err := forward(m, in, caches)
		if err != nil {
			return nil, nil, err
		}
		pos += c
		if pos < len(prompt) {
			continue // still inside the prompt: no pick yet
		}
		last := logits[(len(in)-1)*vocab:]
		picks = append(picks, int32(Argmax(last)))
		rows = append(rows, last...)
	}
	if len(picks) != n {
		return nil, nil, fmt.Errorf("the calls %v make %d picks, want %d", calls, len(picks), n)
	}
	return picks, rows, nil
}

// forward runs one call on its own graph, closed before the next call so
// the caches can reuse their buffers.
func forward(m Model, tokens []int32, caches []kv.Cache) ([]float32, int, error) {
	g := mlx.NewGraph(mlx.DefaultStream())
	defer g.Close()
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	logits := m.Forward(g, x, caches)
	if err := g.Err(); err != nil {
		return nil, 0, err
	}
	if logits.Ndim() != 3 || logits.Dim(0) != 1 || logits.Dim(1) != len(tokens) {
		return nil, 0, fmt.Errorf("logits have shape %v, want [1 %d vocab]", logits.Shape(), len(tokens))
	}
	if err := g.Eval(logits); err != nil {
		return nil, 0, err
	}
	vals, err := logits.Float32s()
	if err != nil {
		return nil, 0, err
	}
	return vals, logits.Dim(2), nil
}

func freeCaches(caches []kv.Cache) {
	for _, c := range caches {
		c.Free()
	}
}
