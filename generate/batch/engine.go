// Package batch runs many generations on one model at once by continuous
// batching, as mlx-lm's BatchGenerator does: each step is one forward pass
// over every active sequence, with ragged lengths held in batched caches
// (kv.Rows: kv.Batched for attention, a slot per row, per-row offsets
// and masks; kv.States for recurrent layers). Requests join the running
// batch and leave it between steps: a new request's prompt is
// processed on its own, in chunks between the batch's steps (after the
// longest prefix an earlier request left in the PromptCache), its caches
// are merged into the batch, and a finished, cancelled or failed sequence
// is filtered out. At most MaxBatch sequences decode or process their
// prompts at once; the rest wait in order.
//
// Batching does not change what a sequence gets: its prompt runs as it
// would alone, and a batched step gives each row the logits it would get
// alone, bit for bit (see kv's doc on batches for the kernel that rounds
// differently), so greedy tokens and seeded draws are those of
// generate.Tokens.
//
// Each request's events arrive on its own channel, one per token, then a
// last one with the finish reason and counts (see the example).
package batch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Model is what the engine needs of a generated model (every nn.Model).
type Model interface {
	Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
	NewCachesWith(opts kv.Options) ([]kv.Cache, error)
	Info() nn.Info
}

// Options configure an engine.
type Options struct {
	// MaxBatch is how many sequences decode at once (default 8).
	MaxBatch int
	// PrefillStep is how many prompt tokens go through the model at once
	// (default 2048).
	PrefillStep int
	// Cache chooses each sequence's caches (its quantization, say). A bound
	// by MaxKVSize pins positions, which a batch cannot hold: it is refused.
	// A KV quantization that starts past offset 0 quantizes the whole batch
	// once its longest row reaches the start, so a shorter row's keys and
	// values are quantized earlier than they would be alone (and its tokens
	// may differ); from offset 0 every row is quantized as alone.
	Cache kv.Options
	// PromptCacheBytes > 0 keeps the caches of finished requests, up to that
	// many bytes, for later prompts that start the same way.
	PromptCacheBytes int64
	// KVBudget > 0 bounds the bytes the batch's caches may reach: a queued
	// request joins only when the batch with it stays within the budget
	// at its longest (every row at the longest prompt plus the most tokens
	// any row may still draw, and a growth step of room), and waits
	// otherwise (first come, first served). Submit refuses a request that alone needs more
	// (ErrOverBudget). The bytes a position takes are measured once, by a
	// one-token step on fresh caches.
	KVBudget int64
	// KVReserve is the part of KVBudget the caches may not take: what the
	// process holds beside them (its activations, libraries and heap), for
	// a budget that bounds all of the process's memory but its weights.
	// It must be below KVBudget. With a reserve the batch at its longest
	// must fit with room for the copy of a group of layers' caches that a
	// join or a leave makes.
	KVReserve int64
	// MaxQueue > 0 bounds the requests waiting for room (those queued
	// beyond the rows free now; none is free while the first queued one
	// waits for the KV budget); Submit refuses more with ErrQueueFull.
	MaxQueue int
	// Stream runs the computation (the default stream when nil).
	Stream *mlx.Stream
	// Draft, when set, is a smaller model sharing the model's tokenizer
	// that drafts for a request running alone (nothing else decoding,
	// under way or waiting): speculative decoding (generate.Options.Draft),
	// NumDraft tokens a step (default generate.DefaultNumDraft), until the
	// request ends or another arrives; it then joins the batch as any
	// request does. A request that asks for logprobs, has a constraint or a
	// repetition penalty, or sets NoDraft decodes without it, and so does
	// every request on a model whose caches cannot be rewound (sliding
	// windows, recurrent states). The draft's caches (one sequence's) are
	// not counted in KVBudget.
	Draft    generate.Model
	NumDraft int
}

// Request is one generation.
type Request struct {
	Prompt   []int32 // token ids, at least one
	Sampling generate.Sampling
	// MaxTokens bounds the tokens generated (default 256).
	MaxTokens int
	// StopTokens end the generation when drawn; a stop token is not sent.
	StopTokens []int32
	// Logprobs asks for each token's log-probability, and TopLogprobs
	// (0 to MaxTopLogprobs) for that many of the most likely alternatives.
	// With a Constraint they are those of the distribution it leaves (the
	// tokens it rules out have none, and are never listed).
	Logprobs    bool
	TopLogprobs int
	// Constraint, when set, limits each draw to the tokens it allows (a
	// JSON schema or a grammar: package constrain's Matcher): the others'
	// logits are -inf before the penalty, the sampler and the logprobs.
	// Once it is complete the generation ends as by a stop token, without
	// drawing one. A mask that fails, or allows nothing, ends the request
	// alone with an error. The engine owns it from Submit on, and frees it
	// when the request ends, whichever way (refused by Submit too).
	Constraint generate.Constraint
	// NoDraft keeps the engine's draft model (Options.Draft) from drafting
	// for this request.
	NoDraft bool
}

// MaxTopLogprobs is the most alternatives a request may ask for per token.
const MaxTopLogprobs = 20

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Event is what a request's stream delivers: one event per generated token,
// then a last one with Done set.
type Event struct {
	Token       int32
	Logprob     float32        // when the request asked for logprobs
	TopLogprobs []TokenLogprob // most likely first

	Done   bool
	Finish generate.Finish // on the last event
	// Err is set on the last event when the generation did not end by a
	// stop token or MaxTokens: the context's error when it was cancelled
	// (Finish cancelled), or what failed.
	Err error
	// On the last event: the prompt's tokens, those of them taken from the
	// prompt cache, and the tokens generated (a stop token not counted).
	PromptTokens, CachedTokens, Tokens int
	// On the last event: from Submit to the first token (waiting for room
	// and the prompt included; 0 when none came), and to the end.
	FirstTokenDelay, Duration time.Duration
	// On the last event: the tokens the draft model drafted for the
	// request, and those of them the model kept (Options.Draft).
	Drafted, Accepted int
}

// Stats are an engine's counters.
type Stats struct {
	Active         int   // rows decoding
	Prefilling     int   // prompts under way
	Queued         int   // waiting for room in the batch
	Requests       int64 // finished, in all
	PromptTokens   int64 // processed by the model (cached ones not counted)
	Generated      int64
	Steps          int64         // batched steps
	StepTime       time.Duration // in batched steps, in all
	MaxActive      int           // the most sequences one step has run
	PromptCache    PromptCacheStats
	HasPromptCache bool
	ActiveMemory   uint64
	PeakMemory     uint64
	CacheBytes     int64 // the batch's caches
	// KVBudget and KVReserve are Options', and KVPerPosition the bytes
	// one position of one row takes in the caches (measured; 0 without a
	// budget).
	KVBudget, KVReserve, KVPerPosition int64
}

// ErrNoTokenAllowed is the error of a request whose Constraint allows no
// token next (a grammar that cannot go on, nor end).
var ErrNoTokenAllowed = generate.ErrNoTokenAllowed

// ErrClosed is Submit's error once the engine is closing.
var ErrClosed = errors.New("batch: the engine is closed")

// ErrQueueFull is Submit's error when Options.MaxQueue requests wait.
var ErrQueueFull = errors.New("batch: the queue is full")

// OverBudgetError is Submit's error for a request whose prompt and
// MaxTokens alone need more KV than Options.KVBudget holds.
type OverBudgetError struct {
	Prompt, MaxTokens int
	Need, Budget      int64
	// MaxTokensFit is the most tokens the prompt leaves room for (0 or
	// less: the prompt alone is too long).
	MaxTokensFit int
}

func (e *OverBudgetError) Error() string {
	return fmt.Sprintf("batch: a prompt of %d tokens and %d more need %d bytes of KV cache, more than the budget of %d bytes",
		e.Prompt, e.MaxTokens, e.Need, e.Budget)
}

// Engine runs requests on one model in a loop of its own.
type Engine struct {
	m     Model
	opts  Options
	vocab int
	pc    *PromptCache

	mu      sync.Mutex
	queue   []*seq
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	stats   Stats
	blocked bool       // the first queued request did not fit the KV budget
	perPos  int64      // KV bytes a position of a row takes (with a budget)
	active  []*seq     // decoding, owned by the loop
	pending []*seq     // prompts under way, owned by the loop
	batch   []kv.Cache // the batch's per-layer caches (kv.Rows), owned by the loop
	layers  int
	stepped int
	solo    *seq // the request decoding alone with the draft model, owned by the loop
}

// New starts an engine on m.
func New(m Model, opts Options) (*Engine, error) {
	e, err := newEngine(m, opts)
	if err != nil {
		return nil, err
	}
	go e.loop()
	return e, nil
}

// newEngine is an engine whose loop has not started.
func newEngine(m Model, opts Options) (*Engine, error) {
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 8
	}
	if opts.MaxBatch < 0 {
		return nil, fmt.Errorf("batch: max batch %d must be positive", opts.MaxBatch)
	}
	if opts.PrefillStep <= 0 {
		opts.PrefillStep = 2048
	}
	if opts.PromptCacheBytes < 0 {
		return nil, fmt.Errorf("batch: prompt cache bytes %d must be >= 0", opts.PromptCacheBytes)
	}
	if opts.Cache.MaxKVSize > 0 {
		return nil, fmt.Errorf("batch: a max KV size pins the first %d positions of each cache, which a batch cannot hold", kv.MaxKVKeep)
	}
	if opts.KVBudget < 0 || opts.MaxQueue < 0 {
		return nil, fmt.Errorf("batch: KV budget %d and max queue %d must be >= 0", opts.KVBudget, opts.MaxQueue)
	}
	if opts.KVReserve < 0 || (opts.KVReserve > 0 && opts.KVReserve >= opts.KVBudget) {
		return nil, fmt.Errorf("batch: a reserve of %d bytes leaves nothing of the budget of %d for the caches", opts.KVReserve, opts.KVBudget)
	}
	caches, err := m.NewCachesWith(opts.Cache)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	layers := len(caches)
	var perPos int64
	if opts.KVBudget > 0 {
		perPos, err = measurePosition(m, caches, opts.Stream)
	}
	freeCaches(caches)
	if err != nil {
		return nil, fmt.Errorf("batch: measuring the KV a position takes: %w", err)
	}
	e := &Engine{m: m, opts: opts, vocab: m.Info().VocabSize, layers: layers, perPos: perPos,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	e.stats.KVBudget, e.stats.KVReserve, e.stats.KVPerPosition = opts.KVBudget, opts.KVReserve, perPos
	if opts.PromptCacheBytes > 0 {
		e.pc = NewPromptCache(opts.PromptCacheBytes)
	}
	return e, nil
}

// measurePosition runs one token through fresh caches and divides what
// they then hold by the room they made (one growth step): the bytes a
// position of a row takes, across the layers.
func measurePosition(m Model, caches []kv.Cache, s *mlx.Stream) (int64, error) {
	g := mlx.NewGraph(s)
	defer g.Close()
	logits := m.Forward(g, mlx.FromSlice(g, []int32{0}, 1, 1), caches)
	if err := g.Err(); err != nil {
		return 0, err
	}
	if err := g.Eval(logits); err != nil {
		return 0, err
	}
	if err := evalCaches(caches); err != nil {
		return 0, err
	}
	n := (cacheBytes(caches) + kv.Step - 1) / kv.Step
	if n <= 0 {
		return 0, errors.New("the caches hold nothing after a step")
	}
	return n, nil
}

// ChunkActivations measures the memory a prompt chunk of n tokens needs
// beside the caches it fills, as the engine runs one (the caches' arrays
// evaluated, each activation freed once used): the peak of MLX's memory
// while it runs, less what MLX held before and the caches after. It runs on
// fresh caches, freed afterwards.
func ChunkActivations(m Model, n int, s *mlx.Stream) (int64, error) {
	caches, err := m.NewCachesWith(kv.Options{})
	if err != nil {
		return 0, err
	}
	defer freeCaches(caches)
	before := mlx.ActiveMemory()
	mlx.ResetPeakMemory()
	g := mlx.NewGraph(s)
	x := mlx.FromSlice(g, make([]int32, n), 1, n)
	m.Forward(g, x, caches)
	err = g.Err()
	g.Close()
	if err == nil {
		err = kv.EvalLayers(caches)
	}
	if err != nil {
		return 0, fmt.Errorf("batch: measuring a prompt chunk: %w", err)
	}
	return max(0, int64(mlx.PeakMemory())-int64(before)-cacheBytes(caches)), nil
}

// fits reports whether the batch, with s joining it, stays within the KV
// budget at its longest: the room of every row (those decoding, those
// whose prompts run, and s, or the rows the batch already holds room for,
// if more) as long as the longest row or prompt plus the most tokens any
// of them may still draw and the room a growth step may add past what is
// needed (a batch grows a step at a time), or as the room the batch holds
// now, if more.
func (e *Engine) fits(s *seq) bool {
	rows := len(e.active) + len(e.pending)
	if e.opts.KVBudget <= 0 || rows == 0 {
		return true
	}
	return e.need(rows+1, s) <= e.forCaches()
}

// need is the bytes the batch's caches may reach with room for rows rows,
// s among them when not nil: see fits.
func (e *Engine) need(rows int, s *seq) int64 {
	longest, rest, held := 0, 0, 0
	if s != nil {
		longest, rest = len(s.req.Prompt), s.req.MaxTokens
	}
	if e.batch != nil && len(e.active) > 0 {
		longest = max(longest, e.batch[0].Offset())
		room := capacity(e.batch)
		rows = max(rows, room)
		// the positions each row holds room for now: a row that left may
		// have left its length behind
		held = int(cacheBytes(e.batch) / (e.perPos * int64(max(room, 1))))
	}
	for _, a := range e.active {
		rest = max(rest, a.req.MaxTokens-a.tokens)
	}
	for _, p := range e.pending {
		longest = max(longest, len(p.req.Prompt))
		rest = max(rest, p.req.MaxTokens)
	}
	positions := max(held, longest+rest+kv.Step-1)
	need := int64(rows) * int64(positions) * e.perPos
	if e.opts.KVReserve > 0 {
		// All of the process's memory is budgeted: the arrays grow by a
		// copy (a group of layers at a time when a row joins), and a
		// joining row's caches are held twice while it joins.
		need += (need + copyGroups - 1) / copyGroups
	}
	return need
}

// rowRoom is how many rows of room the batch makes when it needs rows:
// rows rounded up to a multiple of roomStep (so that joins one at a time
// copy the batch once in roomStep joins), at most MaxBatch, and within the
// KV budget.
func (e *Engine) rowRoom(rows int) int {
	want := min(max(rows, (rows+roomStep-1)/roomStep*roomStep), max(rows, e.opts.MaxBatch))
	if want > rows && e.opts.KVBudget > 0 && e.need(want, nil) > e.forCaches() {
		return rows
	}
	return want
}

// roomStep is the rows a batch's room grows by.
const roomStep = 4

// capacity is the rows the batch's caches hold room for.
func capacity(caches []kv.Cache) int {
	n := 0
	for _, c := range caches {
		if r, ok := c.(kv.Rows); ok {
			n = max(n, r.RowCapacity())
		}
	}
	return n
}

// forCaches is the part of the budget the caches may take.
func (e *Engine) forCaches() int64 { return e.opts.KVBudget - e.opts.KVReserve }

// PromptCache is the engine's prompt cache (nil without one).
func (e *Engine) PromptCache() *PromptCache { return e.pc }

// Submit checks r and queues it. The stream delivers its events and is
// closed after the last; ctx cancels it, which frees its place in the batch
// at the next step.
func (e *Engine) Submit(ctx context.Context, r Request) (ch <-chan Event, err error) {
	if r.Constraint != nil {
		defer func() {
			if err != nil {
				r.Constraint.Free() // refused: it was handed over all the same
			}
		}()
	}
	if err := e.check(&r); err != nil {
		return nil, err
	}
	if e.opts.KVBudget > 0 {
		b := e.forCaches()
		positions := len(r.Prompt) + r.MaxTokens + kv.Step - 1 // as fits counts a row
		if need := int64(positions) * e.perPos; need > b {
			fit := int(b/e.perPos) - (kv.Step - 1) - len(r.Prompt)
			return nil, &OverBudgetError{Prompt: len(r.Prompt), MaxTokens: r.MaxTokens, Need: need, Budget: b, MaxTokensFit: fit}
		}
	}
	s := &seq{req: r, ctx: ctx, out: newStream(ctx), submitted: time.Now()}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if e.opts.MaxQueue > 0 {
		// those queued beyond the rows free now wait; while the first
		// queued one does not fit the budget, no row is free
		free := 0
		if !e.blocked {
			free = max(0, e.opts.MaxBatch-e.stats.Active-e.stats.Prefilling)
		}
		if len(e.queue)-free >= e.opts.MaxQueue {
			e.mu.Unlock()
			return nil, ErrQueueFull
		}
	}
	e.queue = append(e.queue, s)
	e.mu.Unlock()
	e.poke()
	return s.out.ch, nil
}

// check validates a request, naming the field at fault.
func (e *Engine) check(r *Request) error {
	if len(r.Prompt) == 0 {
		return errors.New("batch: prompt: empty; at least one token is needed")
	}
	for i, t := range r.Prompt {
		if t < 0 || int(t) >= e.vocab {
			return fmt.Errorf("batch: prompt: token %d (position %d) is outside the vocabulary of %d", t, i, e.vocab)
		}
	}
	if err := r.Sampling.Check(e.vocab); err != nil {
		return fmt.Errorf("batch: sampling: %w", err)
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = 256
	}
	if r.MaxTokens < 0 {
		return fmt.Errorf("batch: max tokens %d must be positive", r.MaxTokens)
	}
	if r.TopLogprobs < 0 || r.TopLogprobs > MaxTopLogprobs || r.TopLogprobs >= e.vocab {
		return fmt.Errorf("batch: top logprobs %d must be in [0, %d]", r.TopLogprobs, min(MaxTopLogprobs, e.vocab-1))
	}
	if r.TopLogprobs > 0 && !r.Logprobs {
		return fmt.Errorf("batch: top logprobs %d asked without logprobs", r.TopLogprobs)
	}
	return nil
}

// Close stops taking requests, lets the queued and running ones end, and
// returns when the loop has stopped and released what it held.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.poke()
	<-e.done
}

// Stats are the counters now.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	st := e.stats
	st.Queued = len(e.queue)
	e.mu.Unlock()
	if e.pc != nil {
		st.PromptCache, st.HasPromptCache = e.pc.Stats(), true
	}
	st.ActiveMemory, st.PeakMemory = mlx.ActiveMemory(), mlx.PeakMemory()
	return st
}

func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// seq is one request in the engine.
type seq struct {
	req                   Request
	ctx                   context.Context
	out                   *stream
	sampler               *generate.Sampler
	mask                  generate.Mask // the constraint's, each step
	allow                 []bool        // what mask allows now, for the logits
	stop                  map[int32]bool
	fed                   []int32    // the tokens its caches hold
	last                  int32      // the token to feed next
	caches                []kv.Cache // its own, while its prompt runs
	rest                  []int32    // prompt tokens still to run
	tokens                int
	cached                int
	drafted, accepted     int // by the draft model
	done                  bool
	submitted, firstToken time.Time
}

// ---- the loop ----

func (e *Engine) loop() {
	defer close(e.done)
	defer e.release()
	for {
		e.guard(e.admit)
		if len(e.active) > 0 || len(e.pending) > 0 {
			e.guard(e.step)
			continue
		}
		e.mu.Lock()
		idle := len(e.queue) == 0
		closed := e.closed
		e.mu.Unlock()
		if idle && closed {
			return
		}
		if idle {
			<-e.wake
		}
	}
}

// guard runs f, turning a panic (a fault of the engine or the model) into
// the error of every request in the batch or under way, so that the process
// and the later requests go on.
func (e *Engine) guard(f func()) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		err := fmt.Errorf("batch: internal error: %v", p)
		if s := e.solo; s != nil {
			e.solo = nil
			freeCaches(s.caches)
			s.caches = nil
			e.finish(s, generate.FinishCancelled, err)
		}
		for _, s := range e.pending {
			freeCaches(s.caches)
			s.caches = nil
			e.finish(s, generate.FinishCancelled, err)
		}
		e.pending = nil
		e.failAll(err)
	}()
	f()
}

// release frees what the loop holds once it stops.
func (e *Engine) release() {
	for _, s := range e.pending {
		freeCaches(s.caches)
	}
	freeCaches(e.batch)
	e.batch = nil
	if e.pc != nil {
		e.pc.Clear()
	}
	mlx.ClearCache()
}

// admit moves queued requests toward the batch while there is room (the
// decoding rows and those whose prompts are under way count against
// MaxBatch), and runs prompt chunks, at least one and about PrefillStep
// tokens in all, between two decode steps: a long prompt does not stall the
// batch for longer than a chunk. Each prompt runs alone, in the chunks
// generate.Tokens makes; when its last token has given the first draw, the
// sequence's caches join the batch.
func (e *Engine) admit() {
	e.mu.Lock()
	var cancelled []*seq
	queue := e.queue[:0]
	for _, s := range e.queue {
		if s.ctx.Err() != nil {
			cancelled = append(cancelled, s)
		} else {
			queue = append(queue, s)
		}
	}
	e.queue = queue
	e.mu.Unlock()
	for _, s := range cancelled {
		e.finish(s, generate.FinishCancelled, s.ctx.Err())
	}
	for len(e.active)+len(e.pending) < e.opts.MaxBatch {
		e.mu.Lock()
		e.blocked = false
		if len(e.queue) == 0 {
			e.mu.Unlock()
			break
		}
		s := e.queue[0]
		if e.blocked = !e.fits(s); e.blocked {
			e.mu.Unlock()
			break // it waits for rows to finish
		}
		e.queue = e.queue[1:]
		e.mu.Unlock()
		if err := e.start(s); err != nil {
			e.finish(s, generate.FinishCancelled, err)
			continue
		}
		e.pending = append(e.pending, s)
	}
	var joined []*seq
	budget := e.opts.PrefillStep
	for len(e.pending) > 0 {
		s := e.pending[0]
		if err := s.ctx.Err(); err != nil {
			e.drop(s, err)
			continue
		}
		if len(s.rest) > 1 {
			n := min(e.opts.PrefillStep, len(s.rest)-1)
			if n > budget && budget < e.opts.PrefillStep {
				break // the next chunk waits for the next step
			}
			if err := e.prefillChunk(e.m, s.caches, s.rest[:n]); err != nil {
				e.drop(s, err)
				continue
			}
			s.rest = s.rest[n:]
			budget -= n
			continue
		}
		if err := e.first(s); err != nil {
			e.drop(s, err)
			continue
		}
		e.pending = e.pending[1:]
		budget--
		if !s.done {
			e.speculate(s)
		}
		if s.done {
			freeCaches(s.caches)
			s.caches = nil
			continue
		}
		joined = append(joined, s)
	}
	e.setCounts()
	if len(joined) == 0 {
		return
	}
	joining := make([][]kv.Cache, len(joined))
	for i, s := range joined {
		joining[i] = s.caches
	}
	defer func() {
		for _, s := range joined {
			freeCaches(s.caches)
			s.caches = nil
		}
	}()
	g := mlx.NewGraph(e.opts.Stream)
	defer g.Close()
	merged, err := e.join(g, joining)
	if err != nil {
		for _, s := range joined {
			e.finish(s, generate.FinishCancelled, fmt.Errorf("batch: joining the batch: %w", err))
		}
		e.failAll(fmt.Errorf("batch: joining the batch: %w", err))
		return
	}
	e.batch = merged
	e.active = append(e.active, joined...)
	e.setCounts()
}

// errJoin interrupts a lone request's speculative decoding: others came.
var errJoin = errors.New("batch: requests are waiting")

// waiting is errJoin when a request waits or the engine is closing.
func (e *Engine) waiting() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) > 0 || e.closed {
		return errJoin
	}
	return nil
}

// speculate decodes s, whose first token is drawn, with the draft model
// while it runs alone (nothing else decoding, under way or waiting) and the
// draft may draft for it, until it ends or another request arrives; then it
// joins the batch as any request does (and at once where it may not draft).
// s's caches hold its prompt (s.fed) and s.last is its first token. A
// request that ends here leaves its caches to the prompt cache, as a row
// leaving the batch does.
func (e *Engine) speculate(s *seq) {
	r := s.req
	if e.opts.Draft == nil || r.NoDraft || r.Logprobs || len(e.active) > 0 || len(e.pending) > 0 || e.waiting() != nil {
		return
	}
	opts := generate.Options{
		Sampling: r.Sampling, MaxTokens: r.MaxTokens - s.tokens, PrefillStep: e.opts.PrefillStep, Stream: e.opts.Stream,
		Caches: s.caches, Vocab: e.vocab, Draft: e.opts.Draft, NumDraft: e.opts.NumDraft, Constraint: r.Constraint,
		Interrupt: e.waiting,
	}
	if generate.CanDraft(opts, s.caches) != nil {
		return // a constraint, a repetition penalty, caches that cannot be rewound
	}
	// e.solo is s until it returns: a panic (in the draft's prompt too)
	// leaves it to guard, which a deferred reset would run before.
	e.solo = s
	dcaches := e.opts.Draft.NewCaches()
	defer freeCaches(dcaches)
	for at := 0; at < len(s.fed); at += e.opts.PrefillStep {
		if err := e.prefillChunk(e.opts.Draft, dcaches, s.fed[at:min(len(s.fed), at+e.opts.PrefillStep)]); err != nil {
			e.solo = nil
			e.finish(s, generate.FinishCancelled, fmt.Errorf("%w (the draft model's)", err))
			return
		}
	}
	opts.DraftCaches = dcaches
	d0, a0 := s.drafted, s.accepted
	opts.OnDraft = func(drafted, accepted int) { s.drafted, s.accepted = d0+drafted, a0+accepted }
	first := s.last
	var passed []int32
	st, err := generate.Tokens(s.ctx, withCaches{e.m, e.opts.Cache}, []int32{first}, opts, func(t int32) error {
		passed = append(passed, t)
		e.emit(s, t, nil)
		if s.done {
			return generate.ErrStopped
		}
		return nil
	})
	e.solo = nil
	fed := append(append(s.fed, first), passed...)
	switch {
	case errors.Is(err, errJoin):
		// the caches hold all but s.last, which the batch feeds next
		s.fed = fed[:len(fed)-1]
		return
	case err != nil:
		e.finish(s, generate.FinishCancelled, err)
	case !s.done:
		e.finish(s, st.Finish, nil)
	}
	if held := s.caches[0].Offset(); e.pc != nil && held > 0 && held <= len(fed) {
		g := mlx.NewGraph(e.opts.Stream)
		e.remember(g, fed[:held], s.caches)
		g.Close()
	}
}

// withCaches is a Model as generate takes it: its caches made with opts.
type withCaches struct {
	Model
	opts kv.Options
}

func (m withCaches) NewCaches() []kv.Cache {
	c, err := m.NewCachesWith(m.opts)
	if err != nil {
		return nil
	}
	return c
}

// drop ends the first pending sequence with err.
func (e *Engine) drop(s *seq, err error) {
	e.pending = e.pending[1:]
	freeCaches(s.caches)
	s.caches = nil
	e.finish(s, generate.FinishCancelled, err)
}

// setCounts publishes the sizes of the batch and of the prompts under way.
func (e *Engine) setCounts() {
	e.mu.Lock()
	e.stats.Active, e.stats.Prefilling = len(e.active), len(e.pending)
	e.stats.CacheBytes = cacheBytes(e.batch)
	e.mu.Unlock()
}

// join merges the caches of joining sequences (one list per sequence) into
// a batch, after the rows of the running one: the batch's new caches.
func (e *Engine) join(g *mlx.Graph, joining [][]kv.Cache) ([]kv.Cache, error) {
	merged := make([]kv.Cache, 0, e.layers)
	for j := range e.layers {
		col := make([]kv.Cache, len(joining))
		for i, c := range joining {
			col[i] = c[j]
		}
		b, err := kv.MergeRows(g, col)
		if err != nil {
			freeCaches(merged)
			return nil, err
		}
		merged = append(merged, b)
	}
	room := e.rowRoom(len(e.active) + len(joining))
	if e.batch != nil {
		// Each joining row is written into a free slot of the batch. When
		// the batch must grow, a group of layers at a time, each group's
		// copy made before the next begins: the old arrays go as their
		// copy lands, so the batch is held twice a group at a time, not
		// whole.
		if err := evalCaches(merged); err != nil {
			freeCaches(merged)
			return nil, err
		}
		err := inGroups(e.opts.Stream, e.batch, func(lg *mlx.Graph, j int) error {
			b := e.batch[j].(kv.Rows)
			if err := b.ReserveRows(lg, room); err != nil {
				return err
			}
			return b.Extend(lg, merged[j].(kv.Rows))
		})
		freeCaches(merged)
		if err != nil {
			return nil, err
		}
		return e.batch, nil
	}
	err := inGroups(e.opts.Stream, merged, func(lg *mlx.Graph, j int) error {
		return merged[j].(kv.Rows).ReserveRows(lg, room)
	})
	if err != nil {
		freeCaches(merged)
		return nil, err
	}
	return merged, nil
}

// start readies s's prompt: caches after the longest cached prefix (or
// fresh ones), the tokens still to run, its sampler.
func (e *Engine) start(s *seq) error {
	prompt := s.req.Prompt
	if e.pc != nil {
		g := mlx.NewGraph(e.opts.Stream)
		c, n, err := e.pc.Lookup(g, prompt)
		g.Close()
		if err != nil {
			return err
		}
		s.caches, s.cached = c, n
	}
	if s.caches == nil {
		var err error
		if s.caches, err = e.m.NewCachesWith(e.opts.Cache); err != nil {
			return err
		}
	}
	s.rest = prompt[s.cached:]
	s.sampler = generate.NewSampler(s.req.Sampling)
	s.stop = map[int32]bool{}
	for _, t := range s.req.StopTokens {
		s.stop[t] = true
	}
	e.count(func(st *Stats) { st.PromptTokens += int64(len(prompt) - s.cached) })
	return nil
}

// first runs the prompt's last token (s.rest), draws the first token and
// sends it; the caches then hold the whole prompt, and a copy goes to the
// prompt cache.
func (e *Engine) first(s *seq) error {
	if c := s.req.Constraint; c != nil {
		if c.Done() {
			e.finish(s, generate.FinishStop, nil)
			return nil
		}
		if err := e.mask(s); err != nil {
			return err
		}
	}
	prompt := s.req.Prompt
	s.fed = slices.Clone(prompt)
	if e.pc != nil && len(prompt) > 1 && s.cached < len(prompt)-1 && !trimmable(s.caches) {
		// A recurrent state cannot be cut back to a shorter prefix: keep a
		// copy after all of the prompt but its last token, which the same
		// prompt again (or one that differs only in its last token) reuses.
		if len(s.rest) > 1 {
			if err := e.prefillChunk(e.m, s.caches, s.rest[:len(s.rest)-1]); err != nil {
				return err
			}
			s.rest = s.rest[len(s.rest)-1:]
		}
		g := mlx.NewGraph(e.opts.Stream)
		e.remember(g, prompt[:len(prompt)-1], s.caches)
		g.Close()
	}
	g := mlx.NewGraph(e.opts.Stream)
	defer g.Close()
	x := mlx.FromSlice(g, s.rest, 1, len(s.rest))
	logits := e.m.Forward(g, x, s.caches)
	v := logits.Dim(-1)
	l := x.Dim(1)
	logits = g.Reshape(g.Slice(logits, []int{0, l - 1, 0}, []int{1, l, v}), 1, v)
	pick, lp := e.draw(g, s, logits)
	outs := append([]*mlx.Array{pick}, cacheArrays(s.caches)...)
	if lp != nil {
		outs = append(outs, lp)
	}
	if err := g.Err(); err != nil {
		return fmt.Errorf("batch: prompt: %w", err)
	}
	if err := g.Eval(outs...); err != nil {
		return fmt.Errorf("batch: prompt: %w", err)
	}
	if e.pc != nil {
		e.remember(g, s.fed, s.caches)
	}
	tok, err := pick.Int32s()
	var vals []float32
	if err == nil && lp != nil {
		vals, err = lp.Float32s()
	}
	if err != nil {
		return err
	}
	g.Close()
	s.rest = nil
	e.emit(s, tok[0], vals)
	return nil
}

// forwarder is the part of a model a prompt chunk needs (the engine's
// model, or its draft).
type forwarder interface {
	Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array
}

// prefillChunk runs tokens through m into caches, for their keys and values
// only.
func (e *Engine) prefillChunk(m forwarder, caches []kv.Cache, tokens []int32) error {
	g := mlx.NewGraph(e.opts.Stream)
	defer g.Close()
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	m.Forward(g, x, caches)
	if err := g.Err(); err != nil {
		return fmt.Errorf("batch: prompt: %w", err)
	}
	g.Close() // as generate does: MLX frees each activation once used
	if err := kv.EvalLayers(caches); err != nil {
		return fmt.Errorf("batch: prompt: %w", err)
	}
	return nil
}

// remember puts copies of caches, holding tokens, in the prompt cache.
func (e *Engine) remember(g *mlx.Graph, tokens []int32, caches []kv.Cache) {
	cp := make([]kv.Cache, 0, len(caches))
	for _, c := range caches {
		x, err := kv.Clone(g, c)
		if err != nil {
			freeCaches(cp)
			return
		}
		cp = append(cp, x)
	}
	if evalCaches(cp) != nil {
		freeCaches(cp)
		return
	}
	e.pc.Insert(tokens, cp)
}

// draw is s's next token from logits [1, V]: the penalty over its recent
// tokens, log-probabilities, the sampler's pick ([1]); and the
// log-probabilities when s asked for them.
func (e *Engine) draw(g *mlx.Graph, s *seq, logits *mlx.Array) (*mlx.Array, *mlx.Array) {
	if s.allow != nil {
		v := logits.Dim(-1)
		if v > len(s.allow) { // logits past the vocabulary the engine was told of: none allowed
			s.allow = append(s.allow, make([]bool, v-len(s.allow))...)
		}
		logits = g.Where(mlx.FromSlice(g, s.allow[:v], 1, v), logits, g.Scalar(math.Inf(-1), logits.Dtype()))
	}
	if s.sampler.Penalizes() {
		recent := s.fed[max(0, len(s.fed)-s.sampler.Context()):]
		logits = s.sampler.Penalize(g, logits, mlx.FromSlice(g, recent, len(recent)))
	}
	if !s.req.Logprobs && s.sampler.Greedy() && logits.Dtype() == mlx.Float32 {
		// The argmax of float32 logits, without their normalization (as
		// generate's loop does).
		return g.AsType(g.Argmax(logits, -1, false), mlx.Int32), nil
	}
	logprobs := g.Subtract(logits, g.LogSumExp(logits, true, -1))
	pick := g.AsType(s.sampler.Sample(g, logprobs), mlx.Int32)
	if !s.req.Logprobs {
		return pick, nil
	}
	return pick, g.AsType(logprobs, mlx.Float32)
}

// step runs one batched forward over the active sequences and hands each
// its token; finished ones leave the batch.
func (e *Engine) step() {
	if len(e.active) == 0 {
		return
	}
	// Cancelled requests leave before the step, and so do those whose
	// constraint is complete (a stop), or whose mask fails; the others'
	// masks are ready for their draws.
	var keep []int
	for i, s := range e.active {
		if err := s.ctx.Err(); err != nil {
			e.finish(s, generate.FinishCancelled, err)
			continue
		}
		if c := s.req.Constraint; c != nil {
			if c.Done() {
				e.finish(s, generate.FinishStop, nil)
				continue
			}
			if err := e.mask(s); err != nil {
				e.finish(s, generate.FinishCancelled, err)
				continue
			}
		}
		keep = append(keep, i)
	}
	if len(keep) < len(e.active) {
		e.shrink(keep)
		if len(e.active) == 0 {
			return
		}
	}
	start := time.Now()
	B := len(e.active)
	g := mlx.NewGraph(e.opts.Stream)
	defer g.Close()
	in := make([]int32, B)
	for i, s := range e.active {
		in[i] = s.last
		s.fed = append(s.fed, s.last)
	}
	logits := e.m.Forward(g, mlx.FromSlice(g, in, B, 1), e.batch)
	v := logits.Dim(-1)
	logits = g.Reshape(logits, B, v)
	picks := make([]*mlx.Array, B)
	lps := make([]*mlx.Array, B)
	outs := []*mlx.Array{}
	for i, s := range e.active {
		row := g.Slice(logits, []int{i, 0}, []int{i + 1, v})
		picks[i], lps[i] = e.draw(g, s, row)
		if lps[i] != nil {
			outs = append(outs, lps[i])
		}
	}
	all := g.Concatenate(0, picks...)
	outs = append(outs, all)
	if err := g.Err(); err != nil {
		e.failAll(fmt.Errorf("batch: step: %w", err))
		return
	}
	if err := g.Eval(outs...); err != nil {
		e.failAll(fmt.Errorf("batch: step: %w", err))
		return
	}
	toks, err := all.Int32s()
	if err != nil {
		e.failAll(fmt.Errorf("batch: step: %w", err))
		return
	}
	vals := make([][]float32, B)
	for i, lp := range lps {
		if lp != nil {
			if vals[i], err = lp.Float32s(); err != nil {
				e.failAll(fmt.Errorf("batch: step: %w", err))
				return
			}
		}
	}
	// The step's arrays go before the rows leave, so that an engine seen
	// idle holds nothing of the step.
	g.Close()
	e.stepped++
	e.count(func(st *Stats) {
		st.Steps++
		st.StepTime += time.Since(start)
		st.MaxActive = max(st.MaxActive, B)
	})
	keep = keep[:0]
	for i, s := range e.active {
		e.emit(s, toks[i], vals[i])
		if !s.done {
			keep = append(keep, i)
		}
	}
	if len(keep) < len(e.active) {
		e.shrink(keep)
	}
	if e.stepped%256 == 0 {
		mlx.ClearCache()
	}
}

// mask asks s's constraint for the tokens it allows next, into s.allow
// (by token id, the vocabulary's length).
func (e *Engine) mask(s *seq) error {
	allow, err := s.mask.Allowed(s.req.Constraint, e.vocab)
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	s.allow = allow
	return nil
}

// emit hands s the token t (with its log-probabilities lp when asked
// for): a stop token or the last allowed one finishes s. A constraint is
// moved past t first.
func (e *Engine) emit(s *seq, t int32, lp []float32) {
	if s.stop[t] {
		e.finish(s, generate.FinishStop, nil)
		return
	}
	if c := s.req.Constraint; c != nil {
		if err := c.Accept(t); err != nil {
			e.finish(s, generate.FinishCancelled, fmt.Errorf("batch: constraint: token %d: %w", t, err))
			return
		}
	}
	ev := Event{Token: t}
	if lp != nil {
		ev.Logprob = lp[t]
		ev.TopLogprobs = top(lp, s.req.TopLogprobs)
	}
	s.tokens++
	s.last = t
	if s.tokens == 1 {
		s.firstToken = time.Now()
	}
	s.out.send(ev)
	e.count(func(st *Stats) { st.Generated++ })
	if s.tokens >= s.req.MaxTokens {
		e.finish(s, generate.FinishLength, nil)
	}
}

// top is the k most likely tokens of logprobs, most likely first (the
// lower id first among equals); fewer where fewer are possible (a
// constraint leaves the others at -inf).
func top(logprobs []float32, k int) []TokenLogprob {
	if k == 0 {
		return nil
	}
	idx := make([]int, len(logprobs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return logprobs[idx[a]] > logprobs[idx[b]] })
	out := make([]TokenLogprob, 0, k)
	for _, i := range idx[:k] {
		if math.IsInf(float64(logprobs[i]), -1) {
			break
		}
		out = append(out, TokenLogprob{Token: int32(i), Logprob: logprobs[i]})
	}
	return out
}

// finish sends s's last event.
func (e *Engine) finish(s *seq, f generate.Finish, err error) {
	if s.done {
		return
	}
	s.done = true
	if s.sampler != nil {
		s.sampler.Free()
	}
	if s.req.Constraint != nil {
		s.req.Constraint.Free()
	}
	last := Event{Done: true, Finish: f, Err: err, PromptTokens: len(s.req.Prompt), CachedTokens: s.cached, Tokens: s.tokens,
		Duration: time.Since(s.submitted), Drafted: s.drafted, Accepted: s.accepted}
	if !s.firstToken.IsZero() {
		last.FirstTokenDelay = s.firstToken.Sub(s.submitted)
	}
	s.out.send(last)
	s.out.close()
	e.count(func(st *Stats) { st.Requests++ })
}

// shrink keeps the active rows keep (finished ones already told), putting
// the caches of those that leave in the prompt cache.
func (e *Engine) shrink(keep []int) {
	if e.pc != nil {
		e.rememberLeaving(keep)
	}
	keep = slotOrder(keep)
	active := make([]*seq, len(keep))
	for j, i := range keep {
		active[j] = e.active[i]
	}
	e.active = active
	if len(keep) == 0 {
		freeCaches(e.batch)
		e.batch = nil
		mlx.ClearCache()
	} else {
		// a group of layers at a time, as join copies them
		if err := inGroups(e.opts.Stream, e.batch, func(lg *mlx.Graph, j int) error {
			return e.batch[j].(kv.Rows).Filter(lg, keep)
		}); err != nil {
			e.failAll(fmt.Errorf("batch: step: %w", err))
			return
		}
	}
	e.setCounts()
}

// rememberLeaving puts a copy of each leaving row's caches (the rows of the
// batch not in keep) in the prompt cache. Its graph is closed before the
// batch's rows move: a view of the batch it held would keep the batch's
// buffers shared, and the move would copy them whole.
func (e *Engine) rememberLeaving(keep []int) {
	g := mlx.NewGraph(e.opts.Stream)
	defer g.Close()
	kept := map[int]bool{}
	for _, i := range keep {
		kept[i] = true
	}
	for i, s := range e.active {
		if kept[i] || len(s.fed) == 0 {
			continue
		}
		caches := make([]kv.Cache, 0, e.layers)
		ok := true
		for _, c := range e.batch {
			x, err := c.(kv.Rows).Extract(g, i)
			if err != nil {
				ok = false
				break
			}
			caches = append(caches, x)
		}
		if ok && evalCaches(caches) == nil {
			e.pc.Insert(s.fed, caches)
		} else {
			freeCaches(caches)
		}
	}
}

// slotOrder is the order of the rows keep (ascending) that moves fewest:
// a row among the first len(keep) stays where it is, and the rows after
// them move into the places of those that leave, in order.
func slotOrder(keep []int) []int {
	n := len(keep)
	stays := make([]bool, n)
	var movers []int
	for _, r := range keep {
		if r < n {
			stays[r] = true
		} else {
			movers = append(movers, r)
		}
	}
	out := make([]int, n)
	for i := range out {
		if stays[i] {
			out[i] = i
		} else {
			out[i], movers = movers[0], movers[1:]
		}
	}
	return out
}

// failAll ends every active sequence with err and drops the batch.
func (e *Engine) failAll(err error) {
	for _, s := range e.active {
		e.finish(s, generate.FinishCancelled, err)
	}
	e.active = nil
	freeCaches(e.batch)
	e.batch = nil
	e.setCounts()
}

func (e *Engine) count(f func(*Stats)) {
	e.mu.Lock()
	f(&e.stats)
	e.mu.Unlock()
}

func cacheArrays(caches []kv.Cache) []*mlx.Array {
	var out []*mlx.Array
	for _, c := range caches {
		if s, ok := c.(interface{ State() []*mlx.Array }); ok {
			out = append(out, s.State()...)
		}
	}
	return out
}

func evalCaches(caches []kv.Cache) error {
	if arrs := cacheArrays(caches); len(arrs) > 0 {
		return mlx.Eval(arrs...)
	}
	return nil
}

// copyGroups is how many groups of layers a copy of the batch's caches
// goes in: a quarter of the caches held twice at once, four evaluations.
const copyGroups = 4

// inGroups runs f, which replaces the arrays of caches[j], for each layer
// j, in copyGroups groups of consecutive layers, each on a graph of its
// own evaluated before it closes: what a group's old arrays and
// intermediates held is released before the next group's turn.
func inGroups(s *mlx.Stream, caches []kv.Cache, f func(*mlx.Graph, int) error) error {
	size := (len(caches) + copyGroups - 1) / copyGroups
	for lo := 0; lo < len(caches); lo += size {
		hi := min(lo+size, len(caches))
		err := func() error {
			g := mlx.NewGraph(s)
			defer g.Close()
			for j := lo; j < hi; j++ {
				if err := f(g, j); err != nil {
					return err
				}
			}
			if err := g.Err(); err != nil {
				return err
			}
			return evalCaches(caches[lo:hi])
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func cacheBytes(caches []kv.Cache) int64 {
	n := int64(0)
	for _, c := range caches {
		n += int64(c.Nbytes())
	}
	return n
}

// ---- streams ----

// stream delivers a request's events in order without ever blocking the
// engine: events queue until the receiver takes them. Once the request's
// context has ended, token events the receiver has not taken are dropped
// (the last event is kept), so a receiver that cancels need not drain the
// channel.
type stream struct {
	ctx    context.Context
	ch     chan Event
	mu     sync.Mutex
	queue  []Event
	more   chan struct{}
	closed bool
}

func newStream(ctx context.Context) *stream {
	s := &stream{ctx: ctx, ch: make(chan Event, 1), more: make(chan struct{}, 1)}
	go s.forward()
	return s
}

func (s *stream) send(ev Event) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.signal()
}

func (s *stream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.more <- struct{}{}:
	default:
	}
}

// forward passes queued events on, closing ch after the last.
func (s *stream) forward() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		q, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range q {
			if ev.Done && s.ctx.Err() != nil {
				// The last event always fits: drop a token the
				// receiver has not taken from the buffer instead.
				select {
				case <-s.ch:
				default:
				}
				s.ch <- ev
				continue
			}
			select {
			case s.ch <- ev:
			case <-s.ctx.Done():
			}
		}
		if closed && len(q) == 0 {
			return
		}
		if len(q) == 0 {
			<-s.more
		}
	}
}
