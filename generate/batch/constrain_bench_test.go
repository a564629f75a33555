package batch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/archgen/archgen/constrain"
)

// listSchema asks for more than 128 tokens of JSON: a constrained request
// runs its whole budget, as a plain one does.
const listSchema = `{
	"type": "array",
	"items": {
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 24},
			"age": {"type": "integer", "minimum": 0, "maximum": 120},
			"city": {"type": "string", "maxLength": 24},
			"languages": {"type": "array", "items": {"enum": ["English", "French", "Spanish", "German"]}, "minItems": 1, "maxItems": 3}
		},
		"required": ["name", "age", "city", "languages"],
		"additionalProperties": false
	},
	"minItems": 10
}`

// BenchmarkConstrain decodes 128 tokens, greedy, on SmolLM2 (the demo's
// GGUF), by n streams at once, without and with a JSON schema on every
// stream (the same prompt): tok/s is decoded tokens per second after each
// stream's first token, over all streams; mask-us/token the time a
// matcher takes to compute one mask and accept one token, replayed over
// the constrained texts.
func BenchmarkConstrain(b *testing.B) {
	s := loadSmol(b)
	g, err := s.v.JSONSchema([]byte(listSchema))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Free()
	prompt := s.chat("List ten people as JSON: name, age, city and the languages they speak.")
	for _, n := range []int{1, 4} {
		for _, kind := range []string{"plain", "json-schema"} {
			b.Run(fmt.Sprintf("%s/%d", kind, n), func(b *testing.B) {
				e, err := New(s.m, Options{MaxBatch: n})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				var mu sync.Mutex
				var tokens int
				var decode, total time.Duration // this round's longest stream, all rounds'

				var texts [][]int32
				for range b.N {
					var wg sync.WaitGroup
					for range n {
						r := Request{Prompt: prompt, MaxTokens: 128}
						if kind == "json-schema" {
							m, err := g.NewMatcher()
							if err != nil {
								b.Fatal(err)
							}
							r.Constraint = m
						}
						ch, err := e.Submit(context.Background(), r)
						if err != nil {
							b.Fatal(err)
						}
						wg.Go(func() {
							var ids []int32
							for ev := range ch {
								if !ev.Done {
									ids = append(ids, ev.Token)
									continue
								}
								if ev.Err != nil {
									b.Error(ev.Err)
								}
								mu.Lock()
								tokens += ev.Tokens - 1
								decode = max(decode, ev.Duration-ev.FirstTokenDelay)
								texts = append(texts, ids)
								mu.Unlock()
							}
						})
					}
					wg.Wait()
					total += decode
					decode = 0
				}
				b.ReportMetric(float64(tokens)/total.Seconds(), "tok/s")
				if kind == "json-schema" {
					b.ReportMetric(maskTime(b, g, texts[0]), "mask-us/token")
				}
			})
		}
	}
}

// maskTime replays ids through a fresh matcher: the mean time of a mask and
// an accept, in microseconds.
func maskTime(b *testing.B, g *constrain.Grammar, ids []int32) float64 {
	mask := make([]uint32, 49152/32)
	var el time.Duration
	const rounds = 5
	for range rounds {
		m, err := g.NewMatcher()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, t := range ids {
			clear(mask)
			if err := m.Mask(mask); err != nil {
				b.Fatal(err)
			}
			if err := m.Accept(t); err != nil {
				b.Fatal(err)
			}
		}
		el += time.Since(start)
		m.Free()
	}
	return float64(el.Microseconds()) / float64(rounds*len(ids))
}
