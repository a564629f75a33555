package batch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/llama"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
	"github.com/archgen/archgen/runtime/nn/nntest"
)

// Parity checkpoints made by mlx-lm (see parity/refgen): llama's sliding
// case has windows of 6 on half its layers, shorter than most prompts here.
func load(t testing.TB, arch, cas string) nn.Model {
	t.Helper()
	m, err := registry.Load(filepath.Join("../../testdata/parity", arch, cas, "model"), nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

// slidingQuantizable is a random llama (runtime/kv/testdata/sliding_head32.json) with windows of 5 on half
// its layers and a head dim of 32, which KV quantization in groups of 32
// needs (the parity checkpoint with windows has a head dim of 16).
func slidingQuantizable(t testing.TB) nn.Model {
	t.Helper()
	config, err := os.ReadFile("../../runtime/kv/testdata/sliding_head32.json")
	if err != nil {
		t.Fatal(err)
	}
	return nntest.Model(t, llama.Arch, config, 7)
}

// prompt i: lengths from 1 to 19, ids below 250.
func prompt(i int) []int32 {
	p := make([]int32, 1+(i*7)%19)
	for j := range p {
		p[j] = int32((i*31 + j*13 + 5) % 250)
	}
	return p
}

type result struct {
	tokens []int32
	last   Event
	events []Event
}

// solo is what generate.Tokens gives r alone, with caches made as opts says.
func solo(t *testing.T, m nn.Model, opts kv.Options, r Request) result {
	t.Helper()
	caches, err := m.NewCachesWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer freeCaches(caches)
	var out result
	st, err := generate.Tokens(context.Background(), m, r.Prompt, generate.Options{
		Sampling: r.Sampling, MaxTokens: r.MaxTokens, StopTokens: r.StopTokens, Caches: caches,
	}, func(tok int32) error {
		out.tokens = append(out.tokens, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out.last = Event{Done: true, Finish: st.Finish, Tokens: st.Tokens, PromptTokens: st.PromptTokens}
	return out
}

// collect reads a stream to its end.
func collect(ch <-chan Event) result {
	var out result
	for ev := range ch {
		out.events = append(out.events, ev)
		if ev.Done {
			out.last = ev
			continue
		}
		out.tokens = append(out.tokens, ev.Token)
	}
	return out
}

// submitAll submits every request, then collects every stream.
func submitAll(t *testing.T, e *Engine, reqs []Request) []result {
	t.Helper()
	chans := make([]<-chan Event, len(reqs))
	for i, r := range reqs {
		ch, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		chans[i] = ch
	}
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Go(func() { out[i] = collect(ch) })
	}
	wg.Wait()
	return out
}

func requests(n int, vary func(i int, r *Request)) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{Prompt: prompt(i), MaxTokens: 6 + (i*5)%11}
		if vary != nil {
			vary(i, &reqs[i])
		}
	}
	return reqs
}

// TestBatchMatchesSolo: 16 requests of different prompt lengths and token
// budgets decode in one batch (rows leaving as they finish), and each gets
// exactly the tokens, finish reason and counts it gets alone, on plain
// llama, on windows shorter than the prompts, with quantized KV (on full
// layers and on windows), and on written-out attention over grouped heads
// (gemma2).
func TestBatchMatchesSolo(t *testing.T) {
	cases := []struct {
		arch, cas string
		cache     kv.Options
	}{
		{"llama", "base", kv.Options{}},
		{"llama", "sliding", kv.Options{}},
		{"mistral", "base", kv.Options{KVBits: 4, KVGroupSize: 32}},
		{"llama", "base", kv.Options{KVBits: 8, KVGroupSize: 32}},
		{"gemma2", "defaults", kv.Options{}},
		{"qwen3", "base", kv.Options{}},
		{"qwen3_next", "base", kv.Options{}},           // attention and recurrent layers: state rows beside key and value rows
		{"granitemoehybrid", "moe_nope", kv.Options{}}, // state-space layers, routed experts
		{"nemotron_h", "pattern_moe", kv.Options{}},    // fewer caches than layers
		{"mamba2", "tied_groups", kv.Options{}},        // no attention: no mask, state rows only
		{"falcon_h1", "norm_after_gate", kv.Options{}}, // a list of a state and keys and values a layer
		{"olmo_hybrid", "default_pattern", kv.Options{}},
		{"mamba", "untied_biased", kv.Options{}},
		{"jamba", "moe_periods", kv.Options{}},
		{"plamo2", "step2_tied", kv.Options{}},
		{"baichuan_m1", "swa_heads", kv.Options{}},                                      // a state beside window and full caches
		{"recurrent_gemma", "attention_first_untied", kv.Options{}},                     // state rows beside window caches
		{"rwkv7", "heads16_untied", kv.Options{}},                                       // three state slots a layer, the first layer's values carried
		{"bailing_moe_linear", "softmax_groups", kv.Options{}},                          // lightning states rotated from each row's offset, beside attention
		{"gpt_bigcode", "base", kv.Options{}},                                           // learned positions from each row's offset
		{"deepseek_v3", "base", kv.Options{}},                                           // latent attention: one head of latents and rotated keys a row
		{"deepseek_v3", "uncompressed_queries", kv.Options{KVBits: 8, KVGroupSize: 32}}, // the latent cache quantized
		{"random", "sliding", kv.Options{KVBits: 8, KVGroupSize: 32}},
		{"random", "sliding", kv.Options{KVBits: 4, KVGroupSize: 32, QuantizedKVStart: 0}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s_%s_kv%d", c.arch, c.cas, c.cache.KVBits), func(t *testing.T) {
			var m nn.Model
			if c.arch == "random" {
				m = slidingQuantizable(t)
			} else {
				m = load(t, c.arch, c.cas)
			}
			e, err := New(m, Options{MaxBatch: 16, Cache: c.cache})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			reqs := requests(16, nil)
			got := submitAll(t, e, reqs)
			for i, r := range reqs {
				want := solo(t, m, c.cache, r)
				if !slices.Equal(got[i].tokens, want.tokens) {
					t.Errorf("request %d (prompt of %d): batched %v, alone %v", i, len(r.Prompt), got[i].tokens, want.tokens)
				}
				if l := got[i].last; l.Finish != want.last.Finish || l.Tokens != want.last.Tokens || l.PromptTokens != len(r.Prompt) || l.Err != nil ||
					l.FirstTokenDelay <= 0 || l.Duration < l.FirstTokenDelay {
					t.Errorf("request %d: last event %+v, alone %+v", i, l, want.last)
				}
			}
			st := e.Stats()
			t.Logf("%d steps, at most %d rows at once", st.Steps, st.MaxActive)
			if st.MaxActive < 12 {
				t.Errorf("at most %d rows decoded at once; the 16 requests were not batched", st.MaxActive)
			}
		})
	}
}

// TestSamplingInBatch: seeded draws with every knob, the repetition
// penalty and stop tokens, in one batch with greedy rows, give each row
// what generate.Tokens gives it alone.
func TestSamplingInBatch(t *testing.T) {
	m := load(t, "llama", "base")
	e, err := New(m, Options{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := requests(16, func(i int, r *Request) {
		r.MaxTokens = 20
		switch i % 8 {
		case 1:
			r.Sampling = generate.Sampling{Temp: 0.9, Seed: uint64(i)}
		case 2:
			r.Sampling = generate.Sampling{Temp: 1, TopP: 0.8, Seed: uint64(i)}
		case 3:
			r.Sampling = generate.Sampling{Temp: 1.2, MinP: 0.1, MinTokensToKeep: 3, Seed: uint64(i)}
		case 4:
			r.Sampling = generate.Sampling{Temp: 1, TopK: 5, Seed: uint64(i)}
		case 5:
			r.Sampling = generate.Sampling{RepetitionPenalty: 1.3, RepetitionContext: 8}
		case 6:
			r.Sampling = generate.Sampling{Temp: 0.8, RepetitionPenalty: 1.5, Seed: uint64(i)}
		case 7:
			r.StopTokens = []int32{int32(i), 7, 100, 200} // some rows stop early
		}
	})
	got := submitAll(t, e, reqs)
	for i, r := range reqs {
		want := solo(t, m, kv.Options{}, r)
		if !slices.Equal(got[i].tokens, want.tokens) || got[i].last.Finish != want.last.Finish {
			t.Errorf("request %d (%+v): batched %v (%s), alone %v (%s)", i, r.Sampling, got[i].tokens, got[i].last.Finish, want.tokens, want.last.Finish)
		}
	}
}

// TestSlotOrder: the rows that stay keep their places but those past the
// end, which fill the places of the rows that leave, in order.
func TestSlotOrder(t *testing.T) {
	for _, c := range []struct{ keep, want []int }{
		{[]int{0, 1, 2}, []int{0, 1, 2}},
		{[]int{0, 2, 3}, []int{0, 3, 2}},
		{[]int{1, 2, 3}, []int{3, 1, 2}},
		{[]int{0, 4, 5, 7}, []int{0, 4, 5, 7}},
		{[]int{0, 1, 3, 5, 6}, []int{0, 1, 5, 3, 6}},
		{[]int{6, 7}, []int{6, 7}},
		{nil, []int{}},
	} {
		if got := slotOrder(c.keep); !slices.Equal(got, c.want) {
			t.Errorf("slotOrder(%v) = %v, want %v", c.keep, got, c.want)
		}
	}
}

// TestJoinAndLeave: requests arrive while a batch runs, more than MaxBatch
// at once; at most MaxBatch decode together, the rest wait, and every one
// still gets its solo tokens.
func TestJoinAndLeave(t *testing.T) {
	m := load(t, "llama", "sliding")
	e, err := New(m, Options{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := requests(12, func(i int, r *Request) { r.Prompt = prompt(i + 3) })
	chans := make([]<-chan Event, len(reqs))
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		if i == 6 {
			time.Sleep(20 * time.Millisecond) // the first wave is decoding
		}
		ch, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
		wg.Go(func() { out[i] = collect(ch) })
	}
	wg.Wait()
	for i, r := range reqs {
		want := solo(t, m, kv.Options{}, r)
		if !slices.Equal(out[i].tokens, want.tokens) {
			t.Errorf("request %d: batched %v, alone %v", i, out[i].tokens, want.tokens)
		}
	}
	if st := e.Stats(); st.MaxActive != 4 || st.Requests != 12 {
		t.Errorf("stats %+v: want at most 4 rows at once and 12 requests done", st)
	}
}

// TestBatchWritesInPlace: requests joining a running batch (several at
// once, and later ones one by one) and leaving it at different steps, with
// a prompt cache keeping the leaving rows, never make a cache write copy an
// array whole: every write takes the buffer it writes (none of the prompts
// share a prefix, so no prompt cache entry is written over). On windows
// (of 6) the prompts are one token each and the prompt cache is off: a
// ring's prefill holds its keys and values as the step gave them, which its
// first write copies once, and a ring cannot be cut back to a prefix, so
// each prompt's ring is kept before its last token, which then writes over
// a copy, as it must: those copies are of a prompt's own cache, not the
// batch's. The rows still wrap their rings within the batch.
func TestBatchWritesInPlace(t *testing.T) {
	for _, tc := range []struct {
		cas    string
		pc     int64
		prompt func(i int) []int32
	}{
		{"base", 8 << 20, func(i int) []int32 { return prompt(i + 3) }},
		{"sliding", 0, func(i int) []int32 { return []int32{int32(7 + 11*i)} }},
	} {
		t.Run(tc.cas, func(t *testing.T) {
			m := load(t, "llama", tc.cas)
			e, err := New(m, Options{MaxBatch: 4, PromptCacheBytes: tc.pc})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			before := mlx.CacheRowsCopied()
			reqs := requests(12, func(i int, r *Request) { r.Prompt = tc.prompt(i) })
			out := make([]result, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				if i >= 4 {
					time.Sleep(10 * time.Millisecond) // into a batch under way
				}
				ch, err := e.Submit(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { out[i] = collect(ch) })
			}
			wg.Wait()
			for i, r := range out {
				if r.last.Tokens != reqs[i].MaxTokens {
					t.Errorf("request %d: %d tokens, want %d", i, r.last.Tokens, reqs[i].MaxTokens)
				}
			}
			st := e.Stats()
			if st.MaxActive < 2 || (tc.pc > 0 && st.PromptCache.Entries == 0) {
				t.Fatalf("stats %+v: want rows batched (and kept in the prompt cache when there is one)", st)
			}
			if n := mlx.CacheRowsCopied() - before; n != 0 {
				t.Errorf("cache writes copied %d bytes whole", n)
			}
		})
	}
}

// TestLogprobs: each token's log-probability and the most likely
// alternatives, greedy: the pick is the first alternative.
func TestLogprobs(t *testing.T) {
	m := load(t, "llama", "base")
	e, err := New(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	got := submitAll(t, e, []Request{{Prompt: prompt(3), MaxTokens: 5, Logprobs: true, TopLogprobs: 4}})[0]
	if len(got.tokens) != 5 {
		t.Fatalf("%d tokens", len(got.tokens))
	}
	for _, ev := range got.events[:5] {
		if len(ev.TopLogprobs) != 4 || ev.TopLogprobs[0].Token != ev.Token || ev.TopLogprobs[0].Logprob != ev.Logprob || ev.Logprob > 0 {
			t.Fatalf("event %+v", ev)
		}
		for k := 1; k < 4; k++ {
			if ev.TopLogprobs[k].Logprob > ev.TopLogprobs[k-1].Logprob {
				t.Fatalf("alternatives out of order: %+v", ev.TopLogprobs)
			}
		}
	}
}

// TestCancelFreesSlot: a request whose context ends mid-generation leaves
// the batch with FinishCancelled, and its slot goes to a waiting request
// while the other running one goes on; both get their solo tokens.
func TestCancelFreesSlot(t *testing.T) {
	m := load(t, "llama", "base")
	e, err := New(m, Options{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long, err := e.Submit(ctx, Request{Prompt: prompt(1), MaxTokens: 100000})
	if err != nil {
		t.Fatal(err)
	}
	other := Request{Prompt: prompt(2), MaxTokens: 200}
	och, err := e.Submit(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	third := Request{Prompt: prompt(4), MaxTokens: 10} // waits for a slot
	tch, err := e.Submit(context.Background(), third)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var last Event
	for ev := range long {
		if ev.Done {
			last = ev
			continue
		}
		if n++; n == 5 {
			cancel()
		}
	}
	if last.Finish != generate.FinishCancelled || last.Err == nil || last.Tokens < 5 || last.Tokens > 1000 {
		t.Fatalf("cancelled request ended with %+v", last)
	}
	var ores result
	done := make(chan struct{})
	go func() { ores = collect(och); close(done) }()
	tres := collect(tch)
	select {
	case <-done:
		t.Errorf("the waiting request ended after the running one: the cancelled slot was not freed")
	default:
	}
	<-done
	for _, c := range []struct {
		r   Request
		got result
	}{{other, ores}, {third, tres}} {
		if want := solo(t, m, kv.Options{}, c.r); !slices.Equal(c.got.tokens, want.tokens) {
			t.Errorf("batched %v, alone %v", c.got.tokens, want.tokens)
		}
	}
}

// TestSubmitErrors: bad requests are refused at Submit, naming the field.
func TestSubmitErrors(t *testing.T) {
	m := load(t, "llama", "base")
	e, err := New(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{}, "batch: prompt: empty; at least one token is needed"},
		{Request{Prompt: []int32{1, 256}}, "batch: prompt: token 256 (position 1) is outside the vocabulary of 256"},
		{Request{Prompt: []int32{1}, Sampling: generate.Sampling{TopP: 2}}, "batch: sampling: top-p 2 must be in [0, 1]"},
		{Request{Prompt: []int32{1}, MaxTokens: -1}, "batch: max tokens -1 must be positive"},
		{Request{Prompt: []int32{1}, Logprobs: true, TopLogprobs: 21}, "batch: top logprobs 21 must be in [0, 20]"},
		{Request{Prompt: []int32{1}, TopLogprobs: 2}, "batch: top logprobs 2 asked without logprobs"},
	} {
		if _, err := e.Submit(context.Background(), c.r); err == nil || err.Error() != c.want {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
	e.Close()
	if _, err := e.Submit(context.Background(), Request{Prompt: []int32{1}}); err != ErrClosed {
		t.Errorf("after Close: %v", err)
	}
	if _, err := New(m, Options{Cache: kv.Options{MaxKVSize: 64}}); err == nil ||
		err.Error() != "batch: a max KV size pins the first 4 positions of each cache, which a batch cannot hold" {
		t.Errorf("MaxKVSize: %v", err)
	}
}

// TestPromptCacheNextTurn: a conversation's next turn reuses the caches of
// the previous turn's prompt and answer, and a prompt sharing a system
// prompt with an earlier one reuses that prefix; each still gets its solo
// tokens. On window caches only a whole entry can be reused (nothing is
// cut from a ring that has dropped positions).
func TestPromptCacheNextTurn(t *testing.T) {
	for _, tc := range []struct {
		arch, cas string
		cuts      bool // its caches can be cut back to a shorter prefix
	}{
		{"llama", "base", true},
		{"llama", "sliding", false},   // the window has dropped positions
		{"qwen3_next", "base", false}, // a recurrent state holds no positions
		{"granitemoehybrid", "dense_rope", false},
		{"falcon_h1", "tied_defaults", false}, // a list holding a state cannot be cut either
		{"plamo2", "step3_mqa_untied", false},
		{"baichuan_m1", "shared_heads_mqa", false},
		{"falcon_h1", "tied_defaults", false},                // a list holding a state cannot be cut either
		{"recurrent_gemma", "attention_first_untied", false}, // states beside window caches
		{"rwkv7", "heads16_untied", false},                   // the token shifts and the state hold no positions
		{"bailing_moe_linear", "sigmoid_mqa_tied", false},    // a lightning state cannot be cut back
	} {
		t.Run(tc.arch+"_"+tc.cas, func(t *testing.T) {
			m := load(t, tc.arch, tc.cas)
			e, err := New(m, Options{PromptCacheBytes: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			first := Request{Prompt: prompt(5), MaxTokens: 8}
			a := submitAll(t, e, []Request{first})[0]
			// The next turn: the prompt, the answer, new tokens. The
			// answer's last token was never fed to the model.
			turn := slices.Concat(first.Prompt, a.tokens, []int32{9, 8, 7})
			next := Request{Prompt: turn, MaxTokens: 8}
			b := submitAll(t, e, []Request{next})[0]
			if want := len(first.Prompt) + len(a.tokens) - 1; b.last.CachedTokens != want {
				t.Errorf("next turn reused %d tokens, want %d", b.last.CachedTokens, want)
			}
			if want := solo(t, m, kv.Options{}, next); !slices.Equal(b.tokens, want.tokens) {
				t.Errorf("next turn: %v, alone %v", b.tokens, want.tokens)
			}
			// A shared system prompt: the first entry is cut to the prefix.
			system := slices.Concat(first.Prompt[:4], []int32{1, 2, 3, 4, 5})
			c := submitAll(t, e, []Request{{Prompt: system, MaxTokens: 4}})[0]
			wantCached := 4
			if !tc.cuts {
				wantCached = 0
			}
			if c.last.CachedTokens != wantCached {
				t.Errorf("shared prefix: reused %d tokens, want %d", c.last.CachedTokens, wantCached)
			}
			if want := solo(t, m, kv.Options{}, Request{Prompt: system, MaxTokens: 4}); !slices.Equal(c.tokens, want.tokens) {
				t.Errorf("shared prefix: %v, alone %v", c.tokens, want.tokens)
			}
			// The same prompt again: every token but its last is cached,
			// even where caches cannot be cut (a copy was kept before it).
			again := submitAll(t, e, []Request{next})[0]
			if want := len(next.Prompt) - 1; again.last.CachedTokens != want {
				t.Errorf("same prompt again: reused %d tokens, want %d", again.last.CachedTokens, want)
			}
			if !slices.Equal(again.tokens, b.tokens) {
				t.Errorf("same prompt again: %v, first time %v", again.tokens, b.tokens)
			}
			st := e.Stats().PromptCache
			t.Logf("prompt cache: %+v", st)
			if st.Hits < 1 || st.Misses < 1 || st.Entries == 0 || st.Bytes <= 0 || st.Bytes > st.MaxBytes {
				t.Errorf("prompt cache stats %+v", st)
			}
		})
	}
}

// prefilled is the caches of m after tokens.
func prefilled(t *testing.T, m nn.Model, tokens []int32) []kv.Cache {
	t.Helper()
	caches := m.NewCaches()
	g := mlx.NewGraph(nil)
	defer g.Close()
	m.Forward(g, mlx.FromSlice(g, tokens, 1, len(tokens)), caches)
	if err := g.Eval(cacheArrays(caches)...); err != nil {
		t.Fatal(err)
	}
	return caches
}

// TestPromptCacheLRU: entries past the byte budget are evicted least
// recently used first; a lookup counts as a use; an entry larger than the
// budget is not kept.
func TestPromptCacheLRU(t *testing.T) {
	m := load(t, "llama", "base")
	size := func(c []kv.Cache) int64 { return cacheBytes(c) }
	a, b, c := prefilled(t, m, prompt(10)), prefilled(t, m, prompt(11)), prefilled(t, m, prompt(12))
	one := size(a)
	if size(b) != one || size(c) != one {
		t.Fatalf("entry sizes %d %d %d", one, size(b), size(c))
	}
	p := NewPromptCache(2*one + one/2) // room for two
	defer p.Clear()
	p.Insert(prompt(10), a)
	p.Insert(prompt(11), b)
	g := mlx.NewGraph(nil)
	defer g.Close()
	got, n, err := p.Lookup(g, slices.Concat(prompt(10), []int32{1}))
	if err != nil || n != len(prompt(10)) {
		t.Fatalf("lookup of entry a: %d tokens, %v", n, err)
	}
	freeCaches(got)
	p.Insert(prompt(12), c) // evicts b, the least recently used
	if _, n, _ := p.Lookup(g, slices.Concat(prompt(11), []int32{1})); n != 0 {
		t.Errorf("entry b survived eviction (%d tokens)", n)
	}
	got, n, _ = p.Lookup(g, slices.Concat(prompt(10), []int32{1}))
	freeCaches(got)
	if n == 0 {
		t.Errorf("entry a was evicted although used after b")
	}
	st := p.Stats()
	if st.Entries != 2 || st.Evictions != 1 || st.Hits != 2 || st.Misses != 1 || st.Bytes != 2*one {
		t.Errorf("stats %+v", st)
	}
	p.Insert(prompt(13), slices.Concat(prefilled(t, m, prompt(13)), prefilled(t, m, prompt(14)), prefilled(t, m, prompt(15))))
	if st := p.Stats(); st.Entries != 2 || st.Bytes != 2*one {
		t.Errorf("an entry over the budget was kept: %+v", st)
	}
}

// TestSequentialMemoryFlat: 500 requests one after another, some sharing
// prefixes, some sampled. Without a prompt cache, what MLX holds once the
// engine is idle again is the same after every request. With one, it
// moves only with the sizes of the entries kept, within the budget, and no
// goroutine is left behind.
func TestSequentialMemoryFlat(t *testing.T) {
	m := load(t, "llama", "sliding")
	for _, pc := range []int64{0, 256 << 10} {
		t.Run(fmt.Sprintf("prompt_cache_%d", pc), func(t *testing.T) {
			e, err := New(m, Options{PromptCacheBytes: pc})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			const n, warm = 500, 50
			var base, lo, hi, early, late int64
			var g0 int
			for i := range n {
				r := Request{Prompt: slices.Concat(prompt(i%7), prompt(i)), MaxTokens: 4 + i%9}
				if i%5 == 0 {
					r.Sampling = generate.Sampling{Temp: 0.7, Seed: uint64(i)}
				}
				res := submitAll(t, e, []Request{r})[0]
				if res.last.Err != nil || res.last.Tokens == 0 {
					t.Fatalf("request %d: %+v", i, res.last)
				}
				idle(t, e)
				held := int64(mlx.ActiveMemory()) - e.Stats().PromptCache.Bytes
				switch {
				case i >= warm && i < warm+100:
					early += held
				case i >= n-100:
					late += held
				}
				switch {
				case i == warm:
					base, g0 = held, runtime.NumGoroutine()
				case i > warm:
					lo, hi = min(lo, held-base), max(hi, held-base)
				}
			}
			st := e.Stats()
			t.Logf("%d requests: active memory less the prompt cache's %d bytes (%d entries, %d evictions) moved within [%d, %d] bytes of request %d's (%d)",
				n, st.PromptCache.Bytes, st.PromptCache.Entries, st.PromptCache.Evictions, lo, hi, warm, base)
			if pc == 0 && (lo != 0 || hi != 0) {
				t.Errorf("an idle engine without a prompt cache held [%d, %d] bytes more than after request %d", lo, hi, warm)
			}
			if pc > 0 {
				if st.PromptCache.Evictions == 0 || st.PromptCache.Bytes > pc {
					t.Errorf("prompt cache %+v: want evictions, and no more than %d bytes", st.PromptCache, pc)
				}
				// The entries' arrays take more memory than their
				// bytes by amounts that differ from entry to entry
				// (MLX's allocation sizes, views of larger buffers), so
				// the difference moves as entries come and go. Growth is
				// what must not happen: the mean of the last 100
				// requests against that of the first 100 after the
				// warm-up. Keeping any part of each request would grow it
				// by hundreds of bytes per request.
				drift := (late - early) / 100
				t.Logf("mean drift from requests %d-%d to %d-%d: %d bytes", warm, warm+99, n-100, n-1, drift)
				if drift > 8<<10 || drift < -8<<10 {
					t.Errorf("memory beyond the prompt cache drifted by %d bytes", drift)
				}
			}
			if g := runtime.NumGoroutine(); g > g0+2 {
				t.Errorf("%d goroutines after the requests, %d after the warm-up", g, g0)
			}
		})
	}
}

// idle waits until e has released the batch of the requests it ran (a
// request's last event comes before its row leaves the batch).
func idle(t *testing.T, e *Engine) {
	t.Helper()
	for range 1000 {
		if st := e.Stats(); st.Active == 0 && st.Prefilling == 0 && st.Queued == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the engine is still busy: %+v", e.Stats())
}

// TestChunkedPrefillInterleaves drives the loop by hand: a long prompt runs
// in chunks of PrefillStep tokens, one chunk between two decode steps of
// the running batch, so the batch keeps decoding meanwhile; and the long
// request still gets the tokens generate.Tokens gives it with the same
// chunks.
func TestChunkedPrefillInterleaves(t *testing.T) {
	m := load(t, "llama", "sliding")
	const chunk = 4
	e, err := newEngine(m, Options{MaxBatch: 4, PrefillStep: chunk})
	if err != nil {
		t.Fatal(err)
	}
	defer e.release()
	a := Request{Prompt: prompt(3), MaxTokens: 40}
	ach, err := e.Submit(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	iterate := func() { e.admit(); e.step() }
	for len(e.active) == 0 {
		iterate()
	}
	long := make([]int32, 61)
	for i := range long {
		long[i] = int32((i*17 + 3) % 256)
	}
	b := Request{Prompt: long, MaxTokens: 5}
	bch, err := e.Submit(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for len(e.active) < 2 {
		before := e.Stats().Steps
		iterate()
		if e.Stats().Steps != before+1 {
			t.Fatalf("iteration %d ran %d decode steps, want 1", steps, e.Stats().Steps-before)
		}
		steps++
	}
	// 60 tokens before the last one, in chunks of 4: 15 iterations, the
	// last of which also runs the last token and joins.
	if steps != (len(long)-1)/chunk {
		t.Errorf("the long prompt joined after %d steps of the batch, want %d", steps, (len(long)-1)/chunk)
	}
	for len(e.active) > 0 {
		iterate()
	}
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	got := collect(bch)
	caches, err := m.NewCachesWith(kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer freeCaches(caches)
	var want []int32
	if _, err := generate.Tokens(context.Background(), m, long, generate.Options{MaxTokens: 5, PrefillStep: chunk, Caches: caches},
		func(tok int32) error { want = append(want, tok); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.tokens, want) {
		t.Errorf("long prompt in chunks: %v, alone %v", got.tokens, want)
	}
	if ga, wa := collect(ach), solo(t, m, kv.Options{}, a); !slices.Equal(ga.tokens, wa.tokens) {
		t.Errorf("running request: %v, alone %v", ga.tokens, wa.tokens)
	}
}

// faulty is a real model whose forward pass panics from its call number
// panicAt on: a fault inside the engine's loop.
type faulty struct {
	nn.Model
	calls, panicAt int
}

func (f *faulty) Forward(g *mlx.Graph, tokens *mlx.Array, caches []kv.Cache) *mlx.Array {
	if f.calls++; f.calls >= f.panicAt && f.panicAt > 0 {
		panic("forward failed")
	}
	return f.Model.Forward(g, tokens, caches)
}

// TestPanicFailsRequests: a panic inside a step ends the requests then in
// the batch with an error instead of the process, and the engine serves
// the next ones.
func TestPanicFailsRequests(t *testing.T) {
	f := &faulty{Model: load(t, "llama", "base"), panicAt: 6}
	e, err := New(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	got := submitAll(t, e, requests(3, func(i int, r *Request) { r.MaxTokens = 50 }))
	for i, r := range got {
		if r.last.Err == nil || r.last.Err.Error() != "batch: internal error: forward failed" {
			t.Errorf("request %d ended with %+v", i, r.last)
		}
	}
	f.panicAt = 0
	r := Request{Prompt: prompt(4), MaxTokens: 5}
	if got, want := submitAll(t, e, []Request{r})[0], solo(t, f.Model, kv.Options{}, r); !slices.Equal(got.tokens, want.tokens) {
		t.Errorf("after the fault: %v (%+v), alone %v", got.tokens, got.last, want.tokens)
	}
}

// TestKVBudget: with a KV budget that holds two rows at their longest, eight
// requests all finish with their solo tokens while no more than two decode
// at once; a request that alone needs more than the budget is refused
// naming the tokens that would fit; past MaxQueue requests waiting beyond
// the free rows Submit refuses with ErrQueueFull. The measured bytes a position takes are what
// a prefilled cache holds per position.
func TestKVBudget(t *testing.T) {
	m := load(t, "llama", "base")
	probe, err := newEngine(m, Options{KVBudget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	per := probe.Stats().KVPerPosition
	// 300 positions fill two growth steps
	long := make([]int32, 300)
	for i := range long {
		long[i] = int32(i % 250)
	}
	caches := prefilled(t, m, long)
	defer freeCaches(caches)
	if got := cacheBytes(caches); got != 2*kv.Step*per {
		t.Fatalf("a 300-token prompt's caches hold %d bytes; %d a position measured, so want %d", got, per, 2*kv.Step*per)
	}

	// two rows at their longest: the longest prompt (19) and max tokens
	// (16), and a growth step of room past them
	budget := 2 * int64(19+16+kv.Step-1) * per
	e, err := New(m, Options{KVBudget: budget, MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := requests(8, nil)
	got := submitAll(t, e, reqs)
	for i, r := range reqs {
		want := solo(t, m, kv.Options{}, r)
		if fmt.Sprint(got[i].tokens) != fmt.Sprint(want.tokens) {
			t.Errorf("request %d: %v, alone %v", i, got[i].tokens, want.tokens)
		}
	}
	if st := e.Stats(); st.MaxActive != 2 {
		t.Errorf("at most %d rows decoded at once; the budget holds 2", st.MaxActive)
	}

	_, err = e.Submit(context.Background(), Request{Prompt: long[:10], MaxTokens: 600})
	var over *OverBudgetError
	if !errors.As(err, &over) || over.MaxTokensFit != int(budget/per)-(kv.Step-1)-10 || over.Budget != budget {
		t.Fatalf("a request past the budget: %v (%+v)", err, over)
	}

	// a reserve takes its share of the budget, and a join's copy of a
	// group of layers' caches (a quarter) must fit beside the rows: with
	// the same caches' share as above and a reserve beside it, two rows at
	// their longest no longer fit; with a quarter more, they do
	const reserve = 1 << 20
	for _, c := range []struct {
		budget int64
		rows   int
	}{{budget + reserve, 1}, {budget + budget/4 + per + reserve, 2}} {
		r, err := New(m, Options{KVBudget: c.budget, KVReserve: reserve, MaxBatch: 8})
		if err != nil {
			t.Fatal(err)
		}
		reqs := requests(4, nil)
		got := submitAll(t, r, reqs)
		for i, rq := range reqs {
			if want := solo(t, m, kv.Options{}, rq); fmt.Sprint(got[i].tokens) != fmt.Sprint(want.tokens) {
				t.Errorf("with a reserve, request %d: %v, alone %v", i, got[i].tokens, want.tokens)
			}
		}
		if st := r.Stats(); st.MaxActive != c.rows || st.KVReserve != reserve {
			t.Errorf("budget %d with a reserve of %d: at most %d rows at once (want %d), reserve %d", c.budget, reserve, st.MaxActive, c.rows, st.KVReserve)
		}
		r.Close()
	}
	if _, err := New(m, Options{KVBudget: reserve, KVReserve: reserve}); err == nil ||
		err.Error() != "batch: a reserve of 1048576 bytes leaves nothing of the budget of 1048576 for the caches" {
		t.Errorf("a reserve as large as the budget: %v", err)
	}

	// one row and one waiting: of three requests before the loop runs, the
	// first has a row free, the second waits, the third is refused
	q, err := newEngine(m, Options{MaxBatch: 1, MaxQueue: 1})
	if err != nil {
		t.Fatal(err)
	}
	var chans []<-chan Event
	for i := range 2 {
		ch, err := q.Submit(context.Background(), Request{Prompt: prompt(i), MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if _, err := q.Submit(context.Background(), Request{Prompt: prompt(2), MaxTokens: 2}); err != ErrQueueFull {
		t.Fatalf("a third waiting request: %v, want ErrQueueFull", err)
	}
	go q.loop()
	for _, ch := range chans {
		if r := collect(ch); r.last.Err != nil || r.last.Tokens != 2 {
			t.Errorf("a queued request: %+v", r.last)
		}
	}
	q.Close()
}

// TestDraftForLoneRequests: with a draft model (the same checkpoint at 4
// bits), a request running alone decodes speculatively and gets the tokens
// it gets alone, greedy, with the drafts counted on its last event; one
// that another request joins hands over to the batch mid-way, and both get
// their own tokens; a request that opts out, asks for logprobs, or runs on
// caches that cannot be rewound (windows) decodes without drafts; and a
// lone request's caches go to the prompt cache, so that its next turn
// reuses them.
func TestDraftForLoneRequests(t *testing.T) {
	m := load(t, "llama", "base")
	draft := loadAt(t, "../../out/parity/llama/base/q4_g32")
	e, err := New(m, Options{MaxBatch: 4, Draft: draft, NumDraft: 3, PromptCacheBytes: 8 << 20})
	require.NoError(t, err)
	defer e.Close()
	run := func(r Request) result {
		ch, err := e.Submit(context.Background(), r)
		require.NoError(t, err)
		return collect(ch)
	}
	r := Request{Prompt: prompt(5), MaxTokens: 30}
	want := solo(t, m, kv.Options{}, r)
	got := run(r)
	assert.Equal(t, want.tokens, got.tokens)
	assert.Equal(t, generate.FinishLength, got.last.Finish)
	assert.Positive(t, got.last.Drafted, "a lone request drafts")
	assert.Positive(t, got.last.Accepted, "the 4-bit checkpoint agrees with its float32 often")
	t.Logf("lone: %d of %d drafts kept", got.last.Accepted, got.last.Drafted)

	// its next turn starts with the tokens it ended with: a cache hit
	next := Request{Prompt: append(append(slices.Clone(r.Prompt), got.tokens[:len(got.tokens)-1]...), 7, 9), MaxTokens: 8}
	hits := e.Stats().PromptCache.Hits
	got = run(next)
	assert.Equal(t, solo(t, m, kv.Options{}, next).tokens, got.tokens)
	assert.Greater(t, e.Stats().PromptCache.Hits, hits, "the lone request's caches were kept")

	for name, r := range map[string]Request{
		"opted out": {Prompt: prompt(6), MaxTokens: 12, NoDraft: true},
		"logprobs":  {Prompt: prompt(6), MaxTokens: 12, Logprobs: true},
	} {
		got := run(r)
		assert.Equal(t, solo(t, m, kv.Options{}, r).tokens, got.tokens, name)
		assert.Zero(t, got.last.Drafted, name)
	}

	// a second request arrives while the first drafts: both decode in the
	// batch from then on
	a, b := Request{Prompt: prompt(8), MaxTokens: 400}, Request{Prompt: prompt(9), MaxTokens: 10}
	cha, err := e.Submit(context.Background(), a)
	require.NoError(t, err)
	var early []int32
	for len(early) < 4 { // a is drafting
		ev := <-cha
		require.False(t, ev.Done)
		early = append(early, ev.Token)
	}
	chb, err := e.Submit(context.Background(), b)
	require.NoError(t, err)
	ra, rb := collect(cha), collect(chb)
	ra.tokens = append(early, ra.tokens...)
	assert.Equal(t, solo(t, m, kv.Options{}, a).tokens, ra.tokens)
	assert.Equal(t, solo(t, m, kv.Options{}, b).tokens, rb.tokens)
	assert.Positive(t, ra.last.Drafted, "a drafted while alone")
	assert.Zero(t, rb.last.Drafted)
	assert.Equal(t, 2, e.Stats().MaxActive, "the two decoded in one batch")

	sliding := load(t, "llama", "sliding")
	es, err := New(sliding, Options{MaxBatch: 2, Draft: draft})
	require.NoError(t, err)
	defer es.Close()
	ch, err := es.Submit(context.Background(), r)
	require.NoError(t, err)
	got = collect(ch)
	assert.Equal(t, solo(t, sliding, kv.Options{}, r).tokens, got.tokens)
	assert.Zero(t, got.last.Drafted, "windows cannot be rewound")
}

// TestDraftPanicFailsTheRequest: a fault of the draft model while a lone
// request drafts, or while the draft runs its prompt, ends that request
// with the error (it does not hang), and the engine goes on.
func TestDraftPanicFailsTheRequest(t *testing.T) {
	m := load(t, "llama", "base")
	d := &faulty{Model: load(t, "llama", "base"), panicAt: 4}
	e, err := New(m, Options{Draft: d})
	require.NoError(t, err)
	defer e.Close()
	r := Request{Prompt: prompt(4), MaxTokens: 20}
	got := submitAll(t, e, []Request{r})[0]
	require.Error(t, got.last.Err)
	assert.Equal(t, "batch: internal error: forward failed", got.last.Err.Error())
	d.calls, d.panicAt = 0, 1 // in the draft's run of the prompt
	got = submitAll(t, e, []Request{r})[0]
	require.Error(t, got.last.Err)
	assert.Equal(t, "batch: internal error: forward failed", got.last.Err.Error())
	d.panicAt = 0
	got = submitAll(t, e, []Request{r})[0]
	assert.NoError(t, got.last.Err)
	assert.Equal(t, solo(t, m, kv.Options{}, r).tokens, got.tokens)
}

// loadAt loads a checkpoint directory.
func loadAt(t testing.TB, dir string) nn.Model {
	t.Helper()
	m, err := registry.Load(dir, nn.Options{})
	require.NoError(t, err)
	t.Cleanup(m.Free)
	return m
}
