// Package generate runs a generated model to produce tokens and text:
// sampling as mlx-lm does it (temperature, top-p, min-p, top-k, repetition
// penalty, seeded draws that match mlx-lm's), stop tokens and stop strings,
// a token budget, streaming callbacks and cancellation.
//
// Most programs want the archgen package, which loads a checkpoint with
// its tokenizer and chat template and calls this one. Use generate
// directly to drive a model from token ids:
//
//	st, err := generate.Tokens(ctx, model, prompt, generate.Options{MaxTokens: 64}, func(id int32) error {
//		fmt.Println(id)
//		return nil
//	})
//
// or, with a detokenizer (*tokenizer.Stream), to stream text:
//
//	text, st, err := generate.Text(ctx, model, prompt, tok.NewStream(true), generate.TextOptions{
//		Options:     generate.Options{StopTokens: []int32{eos}},
//		StopStrings: []string{"\n\n"},
//		OnText:      func(s string) error { fmt.Print(s); return nil },
//	})
//
// # Options
//
// Sampling is greedy by default; Sampling.Temp and the filters after it
// sample, with Sampling.Seed for reproducible draws. MaxTokens bounds the
// tokens (default 256). StopTokens end generation without being passed on;
// StopStrings end it where the text contains one, and OnText never receives
// a piece that ends inside a possible stop string. Caches continue from
// caches a previous call filled (a processed prompt, a conversation's
// turns): generation appends to them in place, and afterwards they hold the
// prompt, every token passed on and the stop token (Stats.StopToken), but
// not the last token when MaxTokens ended generation.
//
// # Prompt, progress and cancellation
//
// The prompt goes through the model in chunks of PrefillStep tokens
// (default 2048); OnPrompt is told after each how far the prompt is. The
// context is checked between chunks and between tokens: cancelling stops
// generation at the next one with the context's error, Stats.Finish
// "cancelled" and Stats.PromptDone telling how much of the prompt went
// through. A chunk itself is not interrupted, so PrefillStep bounds how
// long cancelling takes. MemoryLimit stops generation with ErrMemoryLimit
// at the same points.
//
// # The loop
//
// The decode loop is mlx-lm's generate_step: the prompt is processed in
// chunks, then each step's graph is built and queued (async eval) before the
// previous step's token is read, so building in Go overlaps evaluating in
// MLX. Each step's graph is closed as soon as it is queued, keeping only its
// token: the cache buffers it replaced then have no other owner, and MLX
// writes the next step into them in place.
//
// One model may generate in several goroutines at once, each call with
// caches of its own.
package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Model is what generation needs of a generated model.
type Model interface {
	// Forward maps tokens [B, L] to logits [B, L, vocab], through caches.
	Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
	// NewCaches makes the model's per-layer caches.
	NewCaches() []kv.Cache
}

// Options are the knobs of one generation.
type Options struct {
	Sampling
	// MaxTokens bounds the tokens generated (default 256; < 0 for no bound).
	MaxTokens int
	// StopTokens end generation when drawn (an end-of-sequence id, say);
	// the stop token is not passed on.
	StopTokens []int32
	// PrefillStep is how many prompt tokens go through the model at once
	// (default 2048).
	PrefillStep int
	// Stream runs the computation (the default stream when nil).
	Stream *mlx.Stream
	// Caches to continue from (a processed prompt, say); new ones when nil.
	// Generation updates them in place.
	Caches []kv.Cache
	// Vocab bounds the prompt's token ids and top-k; when 0, a model with
	// an Info method (every generated one) gives its vocabulary size. An id
	// outside the vocabulary is an error here: the model's embedding lookup
	// does not check its ids.
	Vocab int
	// MemoryLimit, when set, stops generation with ErrMemoryLimit as soon
	// as MLX's active memory passes it (checked after each prompt chunk and
	// each token), before the next step is queued.
	MemoryLimit uint64
	// OnPrompt, when set, is told after each prompt chunk how many of the
	// prompt's tokens have gone through the model, of how many. A
	// cancelled context stops the prompt at the next chunk: PrefillStep
	// bounds how long cancelling takes.
	OnPrompt func(done, total int)
	// Draft, when set, is a smaller model of the same vocabulary that
	// drafts NumDraft tokens (default DefaultNumDraft) a step for this one
	// to check in one forward: speculative decoding (see speculative.go's
	// comment). Greedy, the tokens are the model's own; sampling, they are
	// distributed as its draws (not the same draws as without a draft).
	// Both models' caches must be rewindable (plain, not sliding windows
	// or recurrent states); a Constraint or a repetition penalty is
	// refused with it. DraftCaches continue the draft's caches as Caches
	// continues the model's (they must hold the same tokens); afterwards
	// both hold the same tokens.
	Draft       Model
	NumDraft    int
	DraftCaches []kv.Cache
	// Lookup > 0 drafts by prompt lookup instead of a model (n-grams of up
	// to Lookup tokens; see speculative.go), with Draft's conditions but
	// no second model.
	Lookup int
	// Interrupt, when set, is asked before each step of speculative
	// decoding (with Draft or Lookup) whether to stop there: an error ends
	// generation with it, the model's caches then holding the prompt and
	// the tokens passed on but the last of them, which the next step would
	// have fed. (The batch engine so hands a lone request's generation over
	// to the batch when others arrive.)
	Interrupt func() error
	// OnDraft, when set, is told after each step of speculative decoding,
	// before the step's tokens are passed on, how many tokens have been
	// drafted so far and how many of them kept (Stats' Drafted and
	// Accepted).
	OnDraft func(drafted, accepted int)
	// Constraint, when set, limits each draw to the tokens it allows (a
	// JSON schema or a grammar: package constrain's Matcher); the others'
	// logits are -inf before the penalty and the sampler. Generation ends,
	// as by a stop token, once it is complete. Each step then waits for
	// the token before the next is queued (the mask needs it), which gives
	// up the overlap of one step's work with the next's. The caller keeps
	// it (and frees it).
	Constraint Constraint
}

// ErrMemoryLimit is the error of a generation that reached
// Options.MemoryLimit.
var ErrMemoryLimit = errors.New("memory limit reached")

// Finish tells why generation ended.
type Finish string

const (
	FinishStop      Finish = "stop"      // a stop token or stop string
	FinishLength    Finish = "length"    // MaxTokens reached
	FinishCancelled Finish = "cancelled" // the context ended, or the callback stopped it
)

// Stats describes one generation.
type Stats struct {
	PromptTokens    int
	Tokens          int // tokens generated (stop token excluded)
	PromptTime      time.Duration
	GenerateTime    time.Duration // from the first token to the last
	FirstTokenDelay time.Duration // from the start to the first token
	PeakMemory      uint64
	Finish          Finish
	// PromptDone is how many of the prompt's tokens went through the model:
	// all of them, unless the context ended during the prompt.
	PromptDone int
	// StopToken is the stop token that ended generation, -1 if none did.
	// It went through the model (the caches hold it) unless generation
	// stopped before the next step was queued.
	StopToken int32
	// Drafted and Accepted count, with a draft model, the tokens it
	// proposed and those the model kept.
	Drafted, Accepted int
}

// AcceptRate is the share of drafted tokens the model kept (0 without a
// draft).
func (s Stats) AcceptRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// PromptTPS is prompt tokens per second.
func (s Stats) PromptTPS() float64 { return rate(s.PromptTokens, s.PromptTime) }

// GenerateTPS is generated tokens per second, after the first.
func (s Stats) GenerateTPS() float64 { return rate(s.Tokens-1, s.GenerateTime) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 || n <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ErrStopped is what a token callback returns to end generation early
// without an error.
var ErrStopped = errors.New("generation stopped")

// Tokens generates after prompt, passing each token to onToken as soon as it
// is known. onToken may return ErrStopped to end generation (Finish is then
// FinishStop) or another error to abort with it.
func Tokens(ctx context.Context, m Model, prompt []int32, opts Options, onToken func(int32) error) (Stats, error) {
	st := Stats{StopToken: -1}
	if opts.Vocab == 0 {
		if in, ok := m.(interface{ Info() nn.Info }); ok {
			opts.Vocab = in.Info().VocabSize
		}
	}
	if len(prompt) == 0 {
		return st, errors.New("generate: empty prompt: at least one token is needed")
	}
	if err := opts.Sampling.Check(opts.Vocab); err != nil {
		return st, fmt.Errorf("generate: %w", err)
	}
	if opts.Vocab > 0 {
		for i, t := range prompt {
			if t < 0 || int(t) >= opts.Vocab {
				return st, fmt.Errorf("generate: prompt token %d (position %d) is outside the vocabulary of %d", t, i, opts.Vocab)
			}
		}
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 256
	}
	if opts.PrefillStep <= 0 {
		opts.PrefillStep = 2048
	}
	caches := opts.Caches
	if caches == nil {
		caches = m.NewCaches()
		defer func() {
			for _, c := range caches {
				c.Free()
			}
		}()
	}
	if opts.Draft != nil || opts.Lookup != 0 {
		if opts.NumDraft == 0 {
			opts.NumDraft = DefaultNumDraft
		}
		return speculative(ctx, m, prompt, opts, caches, st, onToken)
	}
	stop := map[int32]bool{}
	for _, t := range opts.StopTokens {
		stop[t] = true
	}
	s := newSampler(opts.Sampling)
	defer s.free()
	r := &run{m: m, caches: caches, s: s, stream: opts.Stream, con: opts.Constraint}
	defer r.free()
	con := opts.Constraint
	if con != nil && con.Done() {
		st.Finish = FinishStop
		return st, nil
	}
	st.PromptTokens = len(prompt)
	mlx.ResetPeakMemory()
	start := time.Now()

	rest, err := prefillPrompt(ctx, prompt, opts, &st, start, r)
	if err != nil {
		return st, err
	}
	y, err := r.first(rest)
	if err != nil {
		return st, err
	}
	var genStart time.Time
	for n := 0; ; n++ {
		var next *mlx.Array
		more := opts.MaxTokens < 0 || n+1 < opts.MaxTokens
		if more && con == nil {
			// The next step is queued before this one's token is read, so
			// that the device works while the token is passed on.
			if next, err = r.step(y); err != nil {
				y.Free()
				return st, err
			}
		}
		tok, err := y.Item()
		if err == nil && con != nil && !stop[int32(tok)] {
			if err = con.Accept(int32(tok)); err != nil {
				y.Free()
				return st, fmt.Errorf("generate: constraint: token %d: %w", int32(tok), err)
			}
			if more && !con.Done() {
				if next, err = r.step(y); err != nil {
					y.Free()
					return st, err
				}
			}
		}
		y.Free()
		if err != nil {
			next.Free()
			return st, fmt.Errorf("generate: %w", err)
		}
		if n == 0 {
			genStart = firstToken(&st, start, len(prompt), opts.OnPrompt)
		}
		st.GenerateTime = time.Since(genStart)
		id := int32(tok)
		if stop[id] {
			next.Free()
			st.Finish = FinishStop
			st.StopToken = id
			break
		}
		st.Tokens++
		if err := onToken(id); err != nil {
			next.Free()
			if errors.Is(err, ErrStopped) {
				st.Finish = FinishStop
				break
			}
			st.Finish = FinishCancelled
			return st, err
		}
		if next == nil {
			st.Finish = FinishLength
			if con != nil && con.Done() {
				st.Finish = FinishStop // the constraint is complete
			}
			break
		}
		if err := checkMemory(opts.MemoryLimit, "generating", st.Tokens); err != nil {
			next.Free()
			st.PeakMemory = mlx.PeakMemory()
			return st, err
		}
		if err := ctx.Err(); err != nil {
			next.Free()
			st.Finish = FinishCancelled
			st.PeakMemory = mlx.PeakMemory()
			return st, err
		}
		y = next
		if n%256 == 255 {
			mlx.ClearCache()
		}
	}
	st.PeakMemory = mlx.PeakMemory()
	return st, nil
}

// firstToken records, as the first token is known, the prompt's time and
// that all of it went through, tells onPrompt so, and returns the time the
// generation's own clock starts from.
func firstToken(st *Stats, start time.Time, prompt int, onPrompt func(done, total int)) time.Time {
	now := time.Now()
	st.PromptTime = now.Sub(start)
	st.FirstTokenDelay = st.PromptTime
	st.PromptDone = prompt
	if onPrompt != nil {
		onPrompt(prompt, prompt)
	}
	return now
}

// prefillPrompt runs the prompt but its last token through each of runs,
// in chunks of opts.PrefillStep, each evaluated into the caches, telling
// opts.OnPrompt and checking the context and the memory limit between
// chunks; it returns the prompt's rest (its last token), which starts the
// first step. st records how far the prompt went.
func prefillPrompt(ctx context.Context, prompt []int32, opts Options, st *Stats, start time.Time, runs ...*run) ([]int32, error) {
	rest := prompt
	for len(rest) > 1 {
		if err := ctx.Err(); err != nil {
			st.Finish = FinishCancelled
			st.PromptTime = time.Since(start)
			return nil, err
		}
		n := min(opts.PrefillStep, len(rest)-1)
		for _, r := range runs {
			if err := r.prefill(rest[:n]); err != nil {
				return nil, err
			}
		}
		rest = rest[n:]
		st.PromptDone = len(prompt) - len(rest)
		if opts.OnPrompt != nil {
			opts.OnPrompt(st.PromptDone, len(prompt))
		}
		if err := checkMemory(opts.MemoryLimit, "the prompt's first", st.PromptDone); err != nil {
			return nil, err
		}
	}
	return rest, nil
}

// checkMemory is ErrMemoryLimit when MLX holds more than limit bytes
// (none when limit is 0), after tokens tokens of what it was doing.
func checkMemory(limit uint64, doing string, tokens int) error {
	if limit == 0 {
		return nil
	}
	if active := mlx.ActiveMemory(); active > limit {
		return fmt.Errorf("generate: %w: MLX holds %d bytes after %s %d tokens, more than the limit of %d bytes",
			ErrMemoryLimit, active, doing, tokens, limit)
	}
	return nil
}

// run holds the state of one generation between steps.
type run struct {
	m       Model
	caches  []kv.Cache
	s       *sampler
	stream  *mlx.Stream
	history *mlx.Array // owned; the tokens so far, for the repetition penalty
	con     Constraint // nil: none
	mask    Mask       // con's, each step
}

func (r *run) free() { r.history.Free() }

func (r *run) tracksHistory() bool {
	return r.s.RepetitionPenalty != 0 && r.s.RepetitionPenalty != 1
}

// prefill runs tokens through the model for their keys and values only.
func (r *run) prefill(tokens []int32) error {
	g := mlx.NewGraph(r.stream)
	defer g.Close()
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	r.Forward(g, x)
	r.extend(g, g.Reshape(x, -1))
	if err := g.Err(); err != nil {
		return fmt.Errorf("generate: prompt: %w", err)
	}
	// Every output is owned by a cache (or the history), so the graph can be
	// closed before evaluating: MLX then frees each intermediate as soon as
	// its last consumer has run, instead of holding every activation of the
	// chunk until the graph closes; the caches are evaluated layer by layer
	// (kv.EvalLayers).
	g.Close()
	var more []*mlx.Array
	if r.history != nil {
		more = append(more, r.history)
	}
	if err := kv.EvalLayers(r.caches, more...); err != nil {
		return fmt.Errorf("generate: prompt: %w", err)
	}
	mlx.ClearCache()
	return nil
}

// Forward runs the model and discards its logits.
func (r *run) Forward(g *mlx.Graph, x *mlx.Array) *mlx.Array {
	return r.m.Forward(g, x, r.caches)
}

// first is the step of the prompt's last tokens.
func (r *run) first(tokens []int32) (*mlx.Array, error) {
	g := mlx.NewGraph(r.stream)
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	return r.queue(g, x)
}

// step builds and queues the step after token y (an unevaluated array of
// the previous step).
func (r *run) step(y *mlx.Array) (*mlx.Array, error) {
	g := mlx.NewGraph(r.stream)
	return r.queue(g, g.Reshape(y, 1, 1))
}

// queue finishes a step's graph on input x [1, L]: logits of the last
// position, penalty, log-probabilities, the draw; queues its evaluation,
// closes the graph and returns the token, owned by the caller.
func (r *run) queue(g *mlx.Graph, x *mlx.Array) (*mlx.Array, error) {
	defer g.Close()
	logits := r.m.Forward(g, x, r.caches)
	v := logits.Dim(-1)
	l := x.Dim(1)
	logits = g.Reshape(g.Slice(logits, []int{0, l - 1, 0}, []int{1, l, v}), 1, v)
	if r.con != nil {
		allow, err := r.mask.Allowed(r.con, v)
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
		logits = g.Where(mlx.FromSlice(g, allow, 1, v), logits, g.Scalar(math.Inf(-1), logits.Dtype()))
	}
	if r.tracksHistory() {
		r.extend(g, g.Reshape(x, -1))
		logits = r.s.penalize(g, logits, r.history)
	}
	var y *mlx.Array
	if r.s.Temp == 0 && logits.Dtype() == mlx.Float32 {
		// Greedy on float32 logits: the largest logit is the largest
		// log-probability, so the normalization (an exp over the whole
		// vocabulary each step) is left out. In half precision the
		// subtraction rounds, and mlx-lm's pick is the rounded one.
		y = g.Argmax(logits, -1, false)
	} else {
		y = r.s.sample(g, g.Subtract(logits, g.LogSumExp(logits, true, -1)))
	}
	if err := g.AsyncEval(y); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g.Keep(y)
	return y, nil
}

// extend appends tokens to the history, when the penalty needs it.
func (r *run) extend(g *mlx.Graph, tokens *mlx.Array) {
	if !r.tracksHistory() {
		return
	}
	tokens = g.AsType(tokens, mlx.Int32)
	h := tokens
	if r.history != nil {
		h = g.Concatenate(0, r.history, tokens)
	}
	g.Keep(h)
	r.history.Free()
	r.history = h
}
