package tokenizer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

func benchText(b *testing.B) string {
	root, err := reftest.Root()
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "testdata", "tokenizer", "text", "multilingual.txt"))
	if err != nil {
		b.Fatal(err)
	}
	return string(text)
}

// BenchmarkEncode encodes the multilingual test text (2.5 kB) with each
// tokenizer; the BPE cache is warm after the first iteration.
func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, n := range reftest.Names {
		b.Run(n, func(b *testing.B) {
			tk := loadNpm(b, n)
			ids := tk.Encode(text, false)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for b.Loop() {
				tk.Encode(text, false)
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	for _, n := range reftest.Names {
		b.Run(n, func(b *testing.B) {
			tk := loadNpm(b, n)
			ids := tk.Encode(text, false)
			b.ResetTimer()
			for b.Loop() {
				tk.Decode(ids, false)
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkStream feeds the ids of the test text to a Stream one at a time.
func BenchmarkStream(b *testing.B) {
	text := benchText(b)
	for _, n := range reftest.Names {
		b.Run(n, func(b *testing.B) {
			tk := loadNpm(b, n)
			ids := tk.Encode(text, false)
			b.ResetTimer()
			for b.Loop() {
				st := tk.NewStream(false)
				for _, id := range ids {
					st.Step(id)
				}
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, n := range reftest.Names {
		b.Run(n, func(b *testing.B) {
			folder, err := reftest.Folder(n)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := LoadFile(filepath.Join(folder, "tokenizer.json")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMiniLM encodes the multilingual test text with MiniLM's BERT
// tokenizer (WordPiece, which has no cache), alone and as the document of
// a pair; and loads its tokenizer.json.
func BenchmarkMiniLM(b *testing.B) {
	text := benchText(b)
	folder, err := reftest.MiniLM()
	if err != nil {
		b.Fatal(err)
	}
	tk, err := LoadFile(filepath.Join(folder, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		ids := tk.Encode(text, false)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tk.Encode(text, false)
		}
		b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("pair", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tk.EncodePair("what does the text say?", text, true)
		}
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := LoadFile(filepath.Join(folder, "tokenizer.json")); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUnigram encodes the multilingual test text with make_unigram.py's
// xlmr tokenizer (Precompiled normalizer, Metaspace, Unigram model), with
// the model's cache cold and warm; runs the Precompiled normalizer alone;
// and loads the tokenizer.json.
func BenchmarkUnigram(b *testing.B) {
	text := benchText(b)
	dir, err := reftest.Unigram()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "xlmr", "tokenizer.json")
	tk, err := LoadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ids := tk.Encode(text, false)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tk.Encode(text, false)
		}
		b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("encode-cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		u := tk.model.(*unigram)
		for b.Loop() {
			u.cacheMu.Lock()
			clear(u.cache)
			u.cacheMu.Unlock()
			tk.Encode(text, false)
		}
		b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	})
	b.Run("precompiled", func(b *testing.B) {
		p := tk.norm.(normSequence)[0].(*precompiled)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			p.normalize(text)
		}
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := LoadFile(path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
