package generate_test

import (
	"context"
	"testing"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/kv"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// benchModel is the parity tests' tiny llama, float32: small enough that a
// step's time is mostly building and queueing its graph, which these
// benchmarks watch. make bench measures the real checkpoints.
const benchModel = "../testdata/parity/llama/base/model"

func loadBench(b *testing.B) registry.Model {
	m, err := registry.Load(benchModel, nn.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Free)
	return m
}

func benchPrompt(n, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*7919 + 13) % vocab)
	}
	return p
}

// BenchmarkDecodeStep is one decode step after a 128-token prompt: build
// the step's graph, run it, read its token, as generate.Tokens does.
func BenchmarkDecodeStep(b *testing.B) {
	m := loadBench(b)
	vocab := m.Info().VocabSize
	caches := m.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	if _, err := generate.Tokens(context.Background(), m, benchPrompt(128, vocab),
		generate.Options{MaxTokens: 1, Caches: caches}, func(int32) error { return nil }); err != nil {
		b.Fatal(err)
	}
	tok := int32(1)
	for b.Loop() {
		if caches[0].Offset() >= 1024 {
			for _, c := range caches {
				c.Trim(c.Offset() - 128)
			}
		}
		g := mlx.NewGraph(nil)
		x := mlx.FromSlice(g, []int32{tok}, 1, 1)
		y := g.Argmax(g.Reshape(m.Forward(g, x, caches), -1), -1, false)
		if err := g.Eval(y); err != nil {
			b.Fatal(err)
		}
		v, err := y.Item()
		if err != nil {
			b.Fatal(err)
		}
		tok = int32(v)
		g.Close()
	}
}

// BenchmarkPrefill128 is the prefill of a 128-token prompt into fresh
// caches, evaluated as generate's prompt processing evaluates it.
func BenchmarkPrefill128(b *testing.B) {
	m := loadBench(b)
	prompt := benchPrompt(128, m.Info().VocabSize)
	for b.Loop() {
		caches := m.NewCaches()
		g := mlx.NewGraph(nil)
		m.Forward(g, mlx.FromSlice(g, prompt, 1, len(prompt)), caches)
		var outs []*mlx.Array
		for _, c := range caches {
			outs = append(outs, c.(*kv.Plain).State()...)
		}
		if err := g.Eval(outs...); err != nil {
			b.Fatal(err)
		}
		g.Close()
		for _, c := range caches {
			c.Free()
		}
	}
	b.ReportMetric(float64(len(prompt))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}
