package parity

import (
	"encoding/json"
	"github.com/archgen/archgen/runtime/mlx"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReferences checks that the committed references agree with
// themselves: every case of index.json has its refs.json, float32 model dir
// and one dump per level, the dumps have the shapes the index and the config
// promise, each greedy pick is the first maximum of its logits row, and each
// margin in refs.json is that row's top-1 minus top-2 logit.
// (That they are what mlx-lm computes is `make refs-check`'s job.)
func TestReferences(t *testing.T) {
	dir := RefsDir()
	idx, err := LoadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Cases) == 0 || len(idx.Levels) == 0 {
		t.Fatalf("index.json lists %d cases and %d levels", len(idx.Cases), len(idx.Levels))
	}
	for _, c := range idx.Cases {
		t.Run(c.Key(), func(t *testing.T) {
			refs, err := LoadRefs(dir, c)
			if err != nil {
				t.Fatal(err)
			}
			if refs.Arch != c.Arch || refs.Case != c.Case || refs.MLX != idx.MLX || refs.MLXLM != idx.MLXLM {
				t.Errorf("refs.json names %s/%s (mlx %s, mlx-lm %s), index.json %s (mlx %s, mlx-lm %s)",
					refs.Arch, refs.Case, refs.MLX, refs.MLXLM, c.Key(), idx.MLX, idx.MLXLM)
			}
			var cfg struct {
				ModelType  string `json:"model_type"`
				Vocab      int    `json:"vocab_size"`
				TextConfig *struct {
					Vocab int `json:"vocab_size"`
				} `json:"text_config"` // where it nests one, its vocab_size wins
			}
			data, err := os.ReadFile(filepath.Join(dir, c.Arch, c.Case, "model", "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.TextConfig != nil && cfg.TextConfig.Vocab != 0 {
				cfg.Vocab = cfg.TextConfig.Vocab
			}
			if cfg.ModelType != refs.ModelType || cfg.ModelType != c.Arch {
				t.Errorf("config.json model_type %q, refs.json %q, folder %q", cfg.ModelType, refs.ModelType, c.Arch)
			}
			if len(refs.Prompt) != idx.PromptLen {
				t.Errorf("prompt has %d tokens, index.json says %d", len(refs.Prompt), idx.PromptLen)
			}
			for _, lv := range idx.Levels {
				ref, ok := refs.Levels[lv.Name]
				if !ok {
					t.Errorf("refs.json has no level %s", lv.Name)
					continue
				}
				if ref.MLXLMRefuses != "" || ref.LeftOut != "" {
					continue // mlx-lm cannot run it, or runs it wrongly: no dumps (parity_test.go checks it)
				}
				d, err := LoadDumps(dir, c, lv.Name)
				if err != nil {
					t.Error(err)
					continue
				}
				if d.Vocab != cfg.Vocab || len(d.DecodeTokens) != idx.DecodeSteps {
					t.Errorf("%s: vocab %d (config %d), %d decode steps (index %d)",
						lv.Name, d.Vocab, cfg.Vocab, len(d.DecodeTokens), idx.DecodeSteps)
				}
				if !slices.Equal(d.Prompt, refs.Prompt) || !slices.Equal(d.DecodeTokens, ref.DecodeTokens) {
					t.Errorf("%s: the dump's prompt or tokens differ from refs.json", lv.Name)
				}
				if d.LogitsDtype.String() != ref.LogitsDtype {
					t.Errorf("%s: logits are %s, refs.json says %s", lv.Name, d.LogitsDtype, ref.LogitsDtype)
				}
				if len(ref.DecodeMargins) != len(d.DecodeTokens) {
					t.Errorf("%s: %d margins for %d decode steps", lv.Name, len(ref.DecodeMargins), len(d.DecodeTokens))
					continue
				}
				for i, tok := range d.DecodeTokens {
					row := d.Decode[i*d.Vocab : (i+1)*d.Vocab]
					if got := Argmax(row); got != int(tok) && !halfTiePick(row, int(tok), d.LogitsDtype) {
						t.Errorf("%s: step %d picked %d, but its logits' first maximum is %d", lv.Name, i, tok, got)
					}
					if got := Margin(row); got != ref.DecodeMargins[i] {
						t.Errorf("%s: step %d: refs.json's margin %g, the logits' %g", lv.Name, i, ref.DecodeMargins[i], got)
					}
				}
			}
		})
	}
}

// halfTiePick reports whether mlx-lm's greedy pick, made on log-probabilities
// (logits - logsumexp(logits), computed in the logits' dtype), may be tok
// where the raw logits' first maximum is another token: in bfloat16 or
// float16 the subtraction rounds, and two logits a step apart can become
// equal, the first of them then winning. The logsumexp mlx-lm rounded is
// not in the dump, so the exact one's rounding and its two neighbours are
// tried. In float32 no such tie is allowed.
func halfTiePick(row []float32, tok int, dt mlx.Dtype) bool {
	var round func(float32) float32
	switch dt {
	case mlx.BFloat16:
		round = roundBF16
	case mlx.Float16:
		round = func(x float32) float32 { return float32(float16Round(float64(x))) }
	default:
		return false
	}
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	sum := 0.0
	for _, v := range row {
		sum += math.Exp(float64(v) - mx)
	}
	lse := round(float32(mx + math.Log(sum)))
	for _, c := range []float32{lse, nextHalf(lse, round, -1), nextHalf(lse, round, 1)} {
		best, at := float32(math.Inf(-1)), -1
		for j, v := range row {
			if lp := round(v - c); lp > best {
				best, at = lp, j
			}
		}
		if at == tok {
			return true
		}
	}
	return false
}

// roundBF16 rounds x to bfloat16 (to nearest, ties to even), as a float32.
func roundBF16(x float32) float32 {
	b := math.Float32bits(x)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// float16Round rounds x to float16's precision (10 mantissa bits, to
// nearest even) within its normal range, which these logits keep to.
func float16Round(x float64) float64 {
	if x == 0 {
		return 0
	}
	_, e := math.Frexp(x)
	step := math.Ldexp(1, e-11)
	return math.RoundToEven(x/step) * step
}

// nextHalf is the representable neighbour of x in direction dir.
func nextHalf(x float32, round func(float32) float32, dir int) float32 {
	step := float32(math.Abs(float64(x))) / 128
	if step == 0 {
		step = 1e-3
	}
	for y := x; ; {
		y += float32(dir) * step / 16
		if r := round(y); r != x {
			return r
		}
	}
}
