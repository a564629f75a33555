package batch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/gguf"
	"github.com/archgen/archgen/runtime/nn"
)

// benchGGUF is the checkpoint make demo runs: SmolLM2-135M-Instruct in
// llama.cpp's Q4_1 (from scripts/setup).
const benchGGUF = "../../.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

func loadGGUF(b *testing.B) nn.Model {
	g, err := gguf.Read(benchGGUF, nil, registry.Archs())
	if err != nil {
		b.Fatalf("%v (make setup fetches it)", err)
	}
	m, err := g.Load(nn.Options{}, registry.Load)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Free)
	return m
}

func benchRequests(n, vocab int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		p := make([]int32, 32+i%16)
		for j := range p {
			p[j] = int32((i*7919 + j*104729 + 13) % vocab)
		}
		reqs[i] = Request{Prompt: p, MaxTokens: 64}
	}
	return reqs
}

// BenchmarkStreams runs n requests at once (32-47 prompt tokens, 64
// tokens each, greedy) through the engine, beside the same requests one
// after another through generate.Tokens: tok/s is generated tokens per
// second of wall time over all streams, and x-sequential the ratio.
func BenchmarkStreams(b *testing.B) { benchStreams(b, loadGGUF(b)) }

// BenchmarkStreamsTiny is BenchmarkStreams on the parity tests' tiny llama,
// where a step costs mostly building and running its graph, not the
// weights: the engine's own overhead per step.
func BenchmarkStreamsTiny(b *testing.B) { benchStreams(b, load(b, "llama", "base")) }

func benchStreams(b *testing.B, m nn.Model) {
	vocab := m.Info().VocabSize
	for _, n := range []int{1, 4, 16} {
		reqs := benchRequests(n, vocab)
		var seq time.Duration
		b.Run(fmt.Sprintf("sequential/%d", n), func(b *testing.B) {
			tokens := 0
			start := time.Now()
			for range b.N {
				for _, r := range reqs {
					st, err := generate.Tokens(context.Background(), m, r.Prompt, generate.Options{MaxTokens: r.MaxTokens}, func(int32) error { return nil })
					if err != nil {
						b.Fatal(err)
					}
					tokens += st.Tokens
				}
			}
			el := time.Since(start)
			seq = el / time.Duration(b.N)
			b.ReportMetric(float64(tokens)/el.Seconds(), "tok/s")
		})
		b.Run(fmt.Sprintf("batched/%d", n), func(b *testing.B) {
			e, err := New(m, Options{MaxBatch: n})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			tokens := 0
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for _, r := range reqs {
					ch, err := e.Submit(context.Background(), r)
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						for ev := range ch {
							if ev.Done {
								mu.Lock()
								tokens += ev.Tokens
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
			}
			el := time.Since(start)
			b.ReportMetric(float64(tokens)/el.Seconds(), "tok/s")
			if seq > 0 {
				b.ReportMetric(seq.Seconds()/(el.Seconds()/float64(b.N)), "x-sequential")
			}
		})
	}
}
