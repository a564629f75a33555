package batch

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/nn"
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
// llama, on windows shorter than the prompts, with quantized KV, and on
// written-out attention over grouped heads (gemma2).
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
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s_%s_kv%d", c.arch, c.cas, c.cache.KVBits), func(t *testing.T) {
			m := load(t, c.arch, c.cas)
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
				if l := got[i].last; l.Finish != want.last.Finish || l.Tokens != want.last.Tokens || l.PromptTokens != len(r.Prompt) || l.Err != nil {
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
