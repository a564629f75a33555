package generate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// Speculative decoding: a smaller draft model proposes Options.NumDraft
// tokens one by one, and the model checks them all in one forward of as
// many positions plus one. Greedy, the model's pick at each drafted
// position decides: the drafts up to the first one it would not have
// picked are kept, and its own pick there follows them, so the tokens are
// the model's own (a forward of several positions may round a logit
// differently from a one-position step, which only a near-tie shows). When
// sampling, each draft d is kept with probability min(1, p(d)/q(d)) (p the
// model's sampling distribution, q the draft's), and the first one
// rejected is replaced by a draw from the normalised max(0, p - q): the
// tokens are distributed as the model's own draws. Either way the step ends
// with one token of the model's (its pick after the last kept draft, or
// after all of them), so a step gives between 1 and NumDraft+1 tokens.
// Both models' caches are then rewound to what was kept.

// Prompt lookup drafts without a model: the tokens that followed the most
// recent earlier occurrence of the last few tokens (the longest n-gram up
// to Options.Lookup tokens that occurred before), in the prompt or the
// reply so far; editing a text, a reply repeats much of its prompt. The
// model checks them as it checks a model's drafts (a lookup's draft is
// drawn with certainty: sampled, each is kept with probability p(d), and a
// rejected one replaced by a draw from p without d).

// DefaultNumDraft is Options.NumDraft's default.
const DefaultNumDraft = 3

// CanDraft is why speculative decoding (opts.Draft, or opts.Lookup) would
// refuse to run on caches, or nil: the checks Tokens makes before it runs,
// but those of the draft's own caches.
func CanDraft(opts Options, caches []kv.Cache) error {
	if opts.NumDraft == 0 {
		opts.NumDraft = DefaultNumDraft
	}
	return checkDraft(opts, opts.Vocab, caches, nil)
}

// rewindable reports whether c can drop its newest positions whenever
// asked: a plain cache (dense or quantized), or a list of them. A sliding
// window's ring loses what it overwrites, and a recurrent state holds no
// positions.
func rewindable(c kv.Cache) bool {
	switch c := c.(type) {
	case *kv.Plain:
		return true
	case *kv.List:
		for i := range c.Parts() {
			if !rewindable(c.Part(i)) {
				return false
			}
		}
		return c.Parts() > 0
	}
	return false
}

// checkDraft validates speculative decoding's options against the model
// (vocabulary vocab) and both models' caches.
func checkDraft(opts Options, vocab int, caches, draftCaches []kv.Cache) error {
	if opts.NumDraft < 1 {
		return fmt.Errorf("generate: draft tokens %d: want at least 1", opts.NumDraft)
	}
	if opts.Draft != nil && opts.Lookup > 0 {
		return errors.New("generate: a draft model and prompt lookup exclude each other")
	}
	if opts.Lookup < 0 {
		return fmt.Errorf("generate: prompt lookup's n-grams of %d tokens: want at least 1 (0: off)", opts.Lookup)
	}
	if opts.Constraint != nil {
		return errors.New("generate: speculative decoding with a constraint is not supported (the constraint would have to check every draft)")
	}
	if p := opts.RepetitionPenalty; p != 0 && p != 1 {
		return errors.New("generate: speculative decoding with a repetition penalty is not supported (each draft would change the penalty of those after it)")
	}
	if in, ok := opts.Draft.(interface{ Info() nn.Info }); ok && vocab > 0 && in.Info().VocabSize > vocab {
		return fmt.Errorf("generate: the draft model's vocabulary of %d tokens is larger than the model's %d: its drafts could name tokens the model has no embedding for", in.Info().VocabSize, vocab)
	}
	for _, side := range []struct {
		name   string
		caches []kv.Cache
	}{{"model", caches}, {"draft model", draftCaches}} {
		for i, c := range side.caches {
			if !rewindable(c) {
				return fmt.Errorf("generate: speculative decoding rewinds the caches after rejected drafts, and the %s's layer %d holds a %T, which cannot be rewound (a sliding window's ring, a recurrent state)", side.name, i, c)
			}
		}
	}
	if len(draftCaches) > 0 && len(caches) > 0 && draftCaches[0].Offset() != caches[0].Offset() {
		return fmt.Errorf("generate: the draft model's caches hold %d positions and the model's %d: they must hold the same tokens", draftCaches[0].Offset(), caches[0].Offset())
	}
	return nil
}

// speculative is Tokens with a draft model or prompt lookup (see above);
// opts is checked, caches are the model's.
func speculative(ctx context.Context, m Model, prompt []int32, opts Options, caches []kv.Cache, st Stats,
	onToken func(int32) error) (Stats, error) {
	dcaches := opts.DraftCaches
	if dcaches == nil && opts.Draft != nil {
		dcaches = opts.Draft.NewCaches()
		defer func() {
			for _, c := range dcaches {
				c.Free()
			}
		}()
	}
	if err := checkDraft(opts, opts.Vocab, caches, dcaches); err != nil {
		return st, err
	}
	stop := map[int32]bool{}
	for _, t := range opts.StopTokens {
		stop[t] = true
	}
	s := newSampler(opts.Sampling)
	defer s.free()
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	target := &run{m: m, caches: caches, s: s, stream: opts.Stream}
	var draft *run // nil: prompt lookup drafts
	if opts.Draft != nil {
		draft = &run{m: opts.Draft, caches: dcaches, s: s, stream: opts.Stream}
	}
	base := 0 // what both models' caches held before
	if len(caches) > 0 {
		base = caches[0].Offset()
	}
	st.PromptTokens = len(prompt)
	mlx.ResetPeakMemory()
	start := time.Now()
	runs := []*run{target}
	if draft != nil {
		runs = append(runs, draft)
	}
	rest, err := prefillPrompt(ctx, prompt, opts, &st, start, runs...)
	if err != nil {
		return st, err
	}
	k := opts.NumDraft
	y := rest[0]                                // the next token for both models
	var behind []int32                          // tokens the model's caches hold and the draft's do not yet
	fed := slices.Clone(prompt[:len(prompt)-1]) // what the model's caches hold beyond what they held before
	var genStart time.Time
	// emit passes t on; done reports that generation ends with it.
	emit := func(t int32) (done bool, err error) {
		if genStart.IsZero() {
			genStart = firstToken(&st, start, len(prompt), opts.OnPrompt)
		}
		st.GenerateTime = time.Since(genStart)
		if stop[t] {
			st.Finish, st.StopToken = FinishStop, t
			return true, nil
		}
		st.Tokens++
		if err := onToken(t); err != nil {
			if errors.Is(err, ErrStopped) {
				st.Finish = FinishStop
				return true, nil
			}
			st.Finish = FinishCancelled
			return true, err
		}
		if opts.MaxTokens >= 0 && st.Tokens >= opts.MaxTokens {
			st.Finish = FinishLength
			return true, nil
		}
		return false, nil
	}
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			st.Finish = FinishCancelled
			st.PeakMemory = mlx.PeakMemory()
			return st, err
		}
		if opts.Interrupt != nil {
			// The model's caches hold every token passed on but y, the
			// step's own: another loop can go on from them with y.
			if err := opts.Interrupt(); err != nil {
				st.PeakMemory = mlx.PeakMemory()
				return st, err
			}
		}
		// No more drafts than tokens still allowed: the step's own token
		// comes on top of them.
		kk := k
		if opts.MaxTokens >= 0 {
			kk = min(k, opts.MaxTokens-st.Tokens-1)
		}
		// The draft model proposes kk tokens, after catching up, and the
		// model checks them: its pick or logits after y and each draft.
		in := append(behind, y)
		behind = nil
		if kk == 0 && draft != nil {
			behind = in // the step's own token alone: the draft catches up later
		}
		var (
			drafts []int32
			kept   int
			next   int32
			err    error
		)
		switch {
		case draft == nil:
			drafts = lookup(append(slices.Clone(fed), y), kk, opts.Lookup)
			drafts, kept, next, err = checkStep(target, s, y, drafts, rng)
		case s.Temp == 0:
			drafts, kept, next, err = greedyStep(target, draft, in, kk)
		default:
			drafts, kept, next, err = sampledStep(target, draft, s, in, kk, rng)
		}
		if err != nil {
			return st, err
		}
		check := append([]int32{y}, drafts...)
		st.Drafted += len(drafts)
		st.Accepted += kept
		if opts.OnDraft != nil {
			opts.OnDraft(st.Drafted, st.Accepted)
		}
		// Rewind: the model holds y and the drafts, and keeps y and the
		// kept ones; the draft holds y and all drafts but the last.
		fed = append(fed, check[:1+kept]...)
		trim(caches, len(drafts)-kept)
		switch {
		case draft == nil:
		case kept == len(drafts) && kept > 0:
			behind = []int32{drafts[kept-1]}
		case len(drafts) > 0:
			trim(dcaches, len(drafts)-1-kept)
		}
		for i, t := range append(drafts[:kept:kept], next) {
			done, err := emit(t)
			if err != nil {
				return st, err
			}
			if done {
				// The caches keep what was passed on (and a stop token),
				// not the drafts after it; the draft's catch up.
				if i < kept {
					trim(caches, kept-i-1)
					fed = fed[:len(fed)-(kept-i-1)]
				}
				st.PeakMemory = mlx.PeakMemory()
				if draft == nil {
					return st, nil
				}
				return st, align(draft, dcaches, base, fed)
			}
		}
		if err := checkMemory(opts.MemoryLimit, "generating", st.Tokens); err != nil {
			st.PeakMemory = mlx.PeakMemory()
			return st, err
		}
		y = next
		if step%64 == 63 {
			mlx.ClearCache()
		}
	}
}

// greedyStep drafts kk tokens after in (the tokens the draft's caches
// lack, the step's own token last) and checks them, as one graph: the
// draft's steps chained on its own picks, the model's forward over the
// step's token and the drafts, and only the picks read back. It returns the
// drafts, how many the model kept, and its pick after them.
func greedyStep(target, draft *run, in []int32, kk int) ([]int32, int, int32, error) {
	g := mlx.NewGraph(target.stream)
	defer g.Close()
	x := mlx.FromSlice(g, in, 1, len(in))
	y := g.Slice(x, []int{0, len(in) - 1}, []int{1, len(in)})
	steps := []*mlx.Array{y}
	for range kk {
		logits := draft.m.Forward(g, x, draft.caches)
		v, l := logits.Dim(-1), x.Dim(1)
		last := g.Reshape(g.Slice(logits, []int{0, l - 1, 0}, []int{1, l, v}), 1, v)
		x = g.Reshape(g.AsType(g.Argmax(last, -1, false), mlx.Int32), 1, 1)
		steps = append(steps, x)
	}
	check := g.Concatenate(1, steps...) // [1, kk+1]
	picks := g.AsType(g.Argmax(target.m.Forward(g, check, target.caches), -1, false), mlx.Int32)
	out := g.Reshape(g.Concatenate(1, check, picks), -1) // the step's token, the drafts, the picks
	if err := g.Err(); err != nil {
		return nil, 0, 0, fmt.Errorf("generate: %w", err)
	}
	if err := g.Eval(out); err != nil {
		return nil, 0, 0, fmt.Errorf("generate: %w", err)
	}
	ids, err := out.Int32s()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("generate: %w", err)
	}
	drafts, model := ids[1:kk+1], ids[kk+1:]
	kept := 0
	for kept < kk && model[kept] == drafts[kept] {
		kept++
	}
	return slices.Clone(drafts), kept, model[kept], nil
}

// sampledStep is greedyStep when sampling: each draft is drawn from the
// draft's distribution q, and the model's logits after the step's token and
// each draft come back to be checked (acceptDraws).
func sampledStep(target, draft *run, s *sampler, in []int32, kk int, rng *rand.Rand) ([]int32, int, int32, error) {
	y := in[len(in)-1]
	drafts := make([]int32, 0, kk)
	qs := make([][]float64, 0, kk)
	for range kk {
		logits, err := draft.logits(in)
		if err != nil {
			return nil, 0, 0, err
		}
		q, err := s.distribution(logits)
		if err != nil {
			return nil, 0, 0, err
		}
		d := draw(q, rng)
		drafts = append(drafts, d)
		qs = append(qs, q)
		in = []int32{d}
	}
	ps, err := target.allLogits(append([]int32{y}, drafts...))
	if err != nil {
		return nil, 0, 0, err
	}
	kept, next, err := acceptDraws(func(i int) ([]float64, error) { return s.distribution(ps[i]) }, drafts, qs, rng)
	return drafts, kept, next, err
}

// lookup drafts up to k tokens by prompt lookup: the tokens that followed
// the most recent earlier occurrence of seen's last n tokens, for the
// longest n up to maxN that occurred before (none where none did).
func lookup(seen []int32, k, maxN int) []int32 {
	if k <= 0 {
		return nil
	}
	for n := min(maxN, len(seen)-1); n >= 1; n-- {
		tail := seen[len(seen)-n:]
		for i := len(seen) - n - 1; i >= 0; i-- {
			if slices.Equal(seen[i:i+n], tail) {
				return slices.Clone(seen[i+n : min(i+n+k, len(seen))])
			}
		}
	}
	return nil
}

// checkStep has the model check drafts that no model drew (prompt
// lookup's): greedy, against its picks; sampled, as drafts drawn with
// certainty (q one-hot: each kept with probability p(d), a rejected one
// replaced by a draw from p without d).
func checkStep(target *run, s *sampler, y int32, drafts []int32, rng *rand.Rand) ([]int32, int, int32, error) {
	check := append([]int32{y}, drafts...)
	if s.Temp == 0 {
		picks, err := target.picks(check)
		if err != nil {
			return nil, 0, 0, err
		}
		kept := 0
		for kept < len(drafts) && picks[kept] == drafts[kept] {
			kept++
		}
		return drafts, kept, picks[kept], nil
	}
	ps, err := target.allLogits(check)
	if err != nil {
		return nil, 0, 0, err
	}
	qs := make([][]float64, len(drafts))
	for i, d := range drafts {
		qs[i] = make([]float64, len(ps[i]))
		qs[i][d] = 1
	}
	kept, next, err := acceptDraws(func(i int) ([]float64, error) { return s.distribution(ps[i]) }, drafts, qs, rng)
	return drafts, kept, next, err
}

// picks runs tokens through r's model and returns its most likely token
// after each of them.
func (r *run) picks(tokens []int32) ([]int32, error) {
	g := mlx.NewGraph(r.stream)
	defer g.Close()
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	p := g.Reshape(g.AsType(g.Argmax(r.m.Forward(g, x, r.caches), -1, false), mlx.Int32), -1)
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if err := g.Eval(p); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	ids, err := p.Int32s()
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return ids, nil
}

// trim drops the newest n positions of every cache.
func trim(caches []kv.Cache, n int) {
	if n <= 0 {
		return
	}
	for _, c := range caches {
		c.Trim(n)
	}
}

// align makes the draft's caches hold what the model's hold: the base
// positions both held before generation, then fed. It drops what the draft
// holds beyond them, or runs the ones it lacks through it.
func align(draft *run, dcaches []kv.Cache, base int, fed []int32) error {
	if len(dcaches) == 0 {
		return nil
	}
	want, have := base+len(fed), dcaches[0].Offset()
	if have > want {
		trim(dcaches, have-want)
		return nil
	}
	if have < want {
		return draft.prefill(fed[have-base:])
	}
	return nil
}

// logits runs tokens through r's model and returns its logits after the
// last, as float32.
func (r *run) logits(tokens []int32) ([]float32, error) {
	rows, err := r.forwardRows(tokens, 1)
	if err != nil {
		return nil, err
	}
	return rows[0], nil
}

// allLogits runs tokens through r's model and returns its logits after
// each of them, as float32.
func (r *run) allLogits(tokens []int32) ([][]float32, error) {
	return r.forwardRows(tokens, len(tokens))
}

// forwardRows runs tokens and returns the logits of the last n positions.
func (r *run) forwardRows(tokens []int32, n int) ([][]float32, error) {
	g := mlx.NewGraph(r.stream)
	defer g.Close()
	x := mlx.FromSlice(g, tokens, 1, len(tokens))
	logits := r.m.Forward(g, x, r.caches)
	v, l := logits.Dim(-1), len(tokens)
	logits = g.AsType(g.Reshape(g.Slice(logits, []int{0, l - n, 0}, []int{1, l, v}), n, v), mlx.Float32)
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if err := g.Eval(logits); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	flat, err := logits.Float32s()
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*v : (i+1)*v]
	}
	return out, nil
}

// distribution is what s draws from after logits (float32, one position):
// the filters' survivors' probabilities at the temperature, in float64.
func (s *sampler) distribution(logits []float32) ([]float64, error) {
	g := mlx.NewGraph(nil)
	defer g.Close()
	v := len(logits)
	x := mlx.FromSlice(g, logits, 1, v)
	p := g.Softmax(s.filter(g, g.Subtract(x, g.LogSumExp(x, true, -1))), true, -1)
	if err := g.Eval(p); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	f, err := p.Float32s()
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	out := make([]float64, v)
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// acceptDraws is sampling's check of drafts, each drawn from qs[i], against
// the model's distributions dist(i) (read as needed): draft i is kept with
// probability min(1, p(d)/q(d)); the first one rejected is replaced by a
// draw from the normalised max(0, p - q), and after all of them one is
// drawn from the last p. The tokens are then distributed as draws from p.
func acceptDraws(dist func(int) ([]float64, error), drafts []int32, qs [][]float64, rng *rand.Rand) (int, int32, error) {
	for i, d := range drafts {
		p, err := dist(i)
		if err != nil {
			return 0, 0, err
		}
		q := qs[i]
		if u := rng.Float64(); q[d] > 0 && u < math.Min(1, p[d]/q[d]) {
			continue
		}
		// q may be shorter than p (a draft model whose embedding has fewer
		// rows): the tokens past it have no mass under q.
		residual := make([]float64, len(p))
		total := 0.0
		for j := range p {
			qj := 0.0
			if j < len(q) {
				qj = q[j]
			}
			residual[j] = math.Max(0, p[j]-qj)
			total += residual[j]
		}
		if total <= 0 {
			return i, draw(p, rng), nil // p is q: a draw from p
		}
		return i, draw(residual, rng), nil
	}
	p, err := dist(len(drafts))
	if err != nil {
		return 0, 0, err
	}
	return len(drafts), draw(p, rng), nil
}

// draw picks an index with probability proportional to w (not normalised).
func draw(w []float64, rng *rand.Rand) int32 {
	total := 0.0
	for _, x := range w {
		total += x
	}
	u := rng.Float64() * total
	last := 0
	for i, x := range w {
		if x <= 0 {
			continue
		}
		last = i
		if u < x {
			return int32(i)
		}
		u -= x
	}
	return int32(last)
}
