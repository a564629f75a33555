// Package parity checks every generated architecture against mlx-lm, the
// reference implementation, on the references in testdata/parity.
//
// parity/refgen (Python, run by `make refs`) makes those references with
// mlx-lm itself: per architecture a set of tiny checkpoints ("cases"), each
// at several precisions ("levels": float32, bfloat16, float16, 8- and 4-bit
// affine quantization with groups of 64 and 32), with the prefill logits of
// a fixed prompt and mlx-lm's greedy decode: its tokens, the logits of every
// step and each pick's margin (top-1 minus top-2 logit). A case may decode
// with a quantized KV cache (refs.json's kv_cache). parity/refgen/README.md
// defines that layout. `make parity-models` derives each level's model dir
// into out/parity with mlx-lm.
//
// Check holds one level of a case to the standard, the one Hugging Face's
// and llama.cpp's model tests use, which lets a kernel round differently
// from libmlx (even more exactly) and still catches a wrong formula:
//
//   - prefill logits within the level's Tolerances, relative to the largest
//     absolute reference logit;
//   - teacher-forced decode: fed mlx-lm's greedy picks, so that every step
//     has mlx-lm's history, each step's logits within the tolerance,
//     relative to that step's largest absolute logit;
//   - free-running greedy tokens, from the product's decode loop
//     (generate.Tokens): equal to mlx-lm's at every step before mlx-lm's
//     first near-tie, a step whose margin is below the tolerance (NearTie).
//     Past it a correct implementation may pick the other token and go on
//     from a different history.
//
// `go test ./parity/...` runs one subtest per <arch>/<case>/<level> through
// the registry, exactly as a user's checkpoint loads; `make parity` prints
// the table (with each level's near-tie step). TestPlantedBugs shows the
// checks still catch a norm without 1+w and a sliding window off by one.
// Prefill and Greedy run any model with a forward pass and caches, and
// serve cmd/archrun too.
package parity

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/archgen/archgen/runtime/mlx"
)

// Index is testdata/parity/index.json: the cases and levels the references
// cover, and the mlx and mlx-lm versions that made them.
type Index struct {
	Format      int         `json:"format"`
	MLX         string      `json:"mlx"`
	MLXLM       string      `json:"mlx_lm"`
	PromptLen   int         `json:"prompt_len"`
	DecodeSteps int         `json:"decode_steps"`
	Levels      []LevelInfo `json:"levels"`
	Cases       []CaseInfo  `json:"cases"`
}

// LevelInfo is one precision: the dtype of the floating weights and the
// affine quantization (Bits 0 for none).
type LevelInfo struct {
	Name      string `json:"name"`
	Dtype     string `json:"dtype"`
	Bits      int    `json:"bits"`
	GroupSize int    `json:"group_size"`
}

// CaseInfo names one case: Arch is the descriptor it belongs to (its
// config's model_type), Doc what it exercises.
type CaseInfo struct {
	Arch string `json:"arch"`
	Case string `json:"case"`
	Doc  string `json:"doc"`
}

// Key is "<arch>/<case>".
func (c CaseInfo) Key() string { return c.Arch + "/" + c.Case }

// Refs is a case's refs.json.
type Refs struct {
	Format      int                 `json:"format"`
	MLX         string              `json:"mlx"`
	MLXLM       string              `json:"mlx_lm"`
	Arch        string              `json:"arch"`
	Case        string              `json:"case"`
	ModelType   string              `json:"model_type"`
	Doc         string              `json:"doc"`
	Seed        uint32              `json:"seed"`
	Prompt      []int32             `json:"prompt"`
	DecodeCalls []int               `json:"decode_calls"`
	KVCache     *KVQuant            `json:"kv_cache"`
	Levels      map[string]LevelRef `json:"levels"`
}

// KVQuant is the quantized KV cache a case decodes with: mlx-lm's kv_bits,
// kv_group_size and quantized_kv_start. refs.json's kv_cache is null for
// mlx-lm's default caches.
type KVQuant struct {
	Bits      int `json:"kv_bits"`
	GroupSize int `json:"kv_group_size"`
	Start     int `json:"quantized_kv_start"`
}

// LevelRef is what mlx-lm did at one level of a case.
type LevelRef struct {
	Dtype         string          `json:"dtype"`
	Bits          int             `json:"bits"`
	GroupSize     int             `json:"group_size"`
	Mode          string          `json:"mode"` // a case's extra level in another quantization mode ("mxfp4"); "" for affine
	Quantization  json.RawMessage `json:"quantization"`
	LogitsDtype   string          `json:"logits_dtype"`
	PrefillAbsMax float64         `json:"prefill_absmax"`
	PrefillStd    float64         `json:"prefill_std"`
	DecodeTokens  []int32         `json:"decode_tokens"`
	DecodeMargins []float64       `json:"decode_margins"`
	// MLXLMRefuses is mlx-lm's error when it cannot run the level at all
	// (libmlx's CPU gather_mm takes float32 only); there are no dumps.
	MLXLMRefuses string `json:"mlx_lm_refuses"`
	// LeftOut says why the case leaves the level out: mlx-lm runs it, but
	// wrongly (a quirk the descriptor's doc names); there are no dumps.
	LeftOut string `json:"left_out"`
}

// Dumps is one level's <level>.safetensors: what mlx-lm computed, as
// float32 (bfloat16 logits convert exactly).
type Dumps struct {
	Prompt       []int32
	Vocab        int
	Prefill      []float32 // [len(Prompt), Vocab]
	DecodeTokens []int32
	Decode       []float32 // [len(DecodeTokens), Vocab]
	LogitsDtype  mlx.Dtype // the dtype mlx-lm returned the logits in
}

// Root is the repository's root folder.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// RefsDir is testdata/parity, the committed references.
func RefsDir() string { return filepath.Join(Root(), "testdata", "parity") }

// ModelsDir is out/parity, where `make parity-models` derives the level dirs.
func ModelsDir() string { return filepath.Join(Root(), "out", "parity") }

// LoadIndex reads index.json of the references in dir.
func LoadIndex(dir string) (*Index, error) {
	var idx Index
	if err := readJSON(filepath.Join(dir, "index.json"), &idx); err != nil {
		return nil, err
	}
	if idx.Format != 1 {
		return nil, fmt.Errorf("%s: format %d, want 1", filepath.Join(dir, "index.json"), idx.Format)
	}
	return &idx, nil
}

// LoadRefs reads a case's refs.json.
func LoadRefs(dir string, c CaseInfo) (*Refs, error) {
	var r Refs
	path := filepath.Join(dir, c.Arch, c.Case, "refs.json")
	if err := readJSON(path, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// LevelDir is the model dir of a case at a level, under models (ModelsDir).
func LevelDir(models string, c CaseInfo, level string) string {
	return filepath.Join(models, c.Arch, c.Case, level)
}

// LoadDumps reads a case's dumps at one level.
func LoadDumps(dir string, c CaseInfo, level string) (*Dumps, error) {
	return readDumps(filepath.Join(dir, c.Arch, c.Case, level+".safetensors"), nil)
}

// readDumps reads a dumps file at path (prompt, prefill_logits,
// decode_tokens, decode_logits), and then, when extra is set, gives extra
// the file's tensors and what was read, for tensors of its own.
func readDumps(path string, extra func(arrays map[string]*mlx.Array, d *Dumps) error) (*Dumps, error) {
	arrays, _, err := mlx.LoadSafetensors(path, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, a := range arrays {
			a.Free()
		}
	}()
	get := func(name string, ndim int) (*mlx.Array, error) {
		a, ok := arrays[name]
		if !ok {
			return nil, fmt.Errorf("%s: no tensor %q", path, name)
		}
		if a.Ndim() != ndim {
			return nil, fmt.Errorf("%s: tensor %q has shape %v, want %d dimensions", path, name, a.Shape(), ndim)
		}
		return a, nil
	}
	var d Dumps
	prompt, err := get("prompt", 1)
	if err != nil {
		return nil, err
	}
	tokens, err := get("decode_tokens", 1)
	if err != nil {
		return nil, err
	}
	prefill, err := get("prefill_logits", 2)
	if err != nil {
		return nil, err
	}
	decode, err := get("decode_logits", 2)
	if err != nil {
		return nil, err
	}
	if d.Prompt, err = prompt.Int32s(); err != nil {
		return nil, fmt.Errorf("%s: prompt: %w", path, err)
	}
	if d.DecodeTokens, err = tokens.Int32s(); err != nil {
		return nil, fmt.Errorf("%s: decode_tokens: %w", path, err)
	}
	if d.Prefill, err = prefill.Float32s(); err != nil {
		return nil, fmt.Errorf("%s: prefill_logits: %w", path, err)
	}
	if d.Decode, err = decode.Float32s(); err != nil {
		return nil, fmt.Errorf("%s: decode_logits: %w", path, err)
	}
	d.Vocab = prefill.Dim(1)
	d.LogitsDtype = prefill.Dtype()
	if prefill.Dim(0) != len(d.Prompt) || decode.Dim(0) != len(d.DecodeTokens) ||
		decode.Dim(1) != d.Vocab || decode.Dtype() != d.LogitsDtype {
		return nil, fmt.Errorf("%s: shapes disagree: prompt %d, prefill_logits %v %s, decode_tokens %d, decode_logits %v %s",
			path, len(d.Prompt), prefill.Shape(), prefill.Dtype(), len(d.DecodeTokens), decode.Shape(), decode.Dtype())
	}
	if extra != nil {
		if err := extra(arrays, &d); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// Float32Run is a level's float32-run.safetensors, beside its model dir in
// out/parity (parity/refgen's float32-runs, run by `make parity-models`):
// what mlx-lm computes in float32 on the level's weights (its floating
// parameters widened exactly), and mlx-lm's own run at the level's dtype
// measured against it.
type Float32Run struct {
	// Run is the float32 run: the prompt's prefill logits, the greedy
	// picks and the logits of each step.
	Run Dumps
	// LevelPrefill and LevelDecode are mlx-lm at the level's own dtype: the
	// prefill, and the decode fed Run's picks, so that every row has Run's
	// history. Both nil where mlx-lm cannot run the level.
	LevelPrefill, LevelDecode []float32
	// CachePrefill and CacheDecode are the float32 run with its caches
	// holding keys and values in the level's half-precision dtype, as the
	// default's caches hold them (nn.Params.CacheDtype): the prefill
	// through a cache, the decode fed Run's picks. Both nil where the level
	// holds no half-precision tensor.
	CachePrefill, CacheDecode []float32
}

// Float32RunFile is the name of a level's Float32Run in its model dir.
const Float32RunFile = "float32-run.safetensors"

// LoadFloat32Run reads the Float32Run of a case's level under models.
func LoadFloat32Run(models string, c CaseInfo, level string) (*Float32Run, error) {
	path := filepath.Join(LevelDir(models, c, level), Float32RunFile)
	var r Float32Run
	d, err := readDumps(path, func(arrays map[string]*mlx.Array, d *Dumps) error {
		if d.LogitsDtype != mlx.Float32 {
			return fmt.Errorf("%s: logits of %s, want float32", path, d.LogitsDtype)
		}
		level := map[string]*[]float32{
			"level_prefill_logits": &r.LevelPrefill, "level_decode_logits": &r.LevelDecode,
			"cache_prefill_logits": &r.CachePrefill, "cache_decode_logits": &r.CacheDecode,
		}
		rows := map[string]int{
			"level_prefill_logits": len(d.Prompt), "level_decode_logits": len(d.DecodeTokens),
			"cache_prefill_logits": len(d.Prompt), "cache_decode_logits": len(d.DecodeTokens),
		}
		for name, dst := range level {
			a, ok := arrays[name]
			if !ok {
				continue // mlx-lm refuses the level at its own dtype, or the level holds no half-precision tensor
			}
			if a.Ndim() != 2 || a.Dim(0) != rows[name] || a.Dim(1) != d.Vocab || a.Dtype() != mlx.Float32 {
				return fmt.Errorf("%s: tensor %q is %s %v, want float32 [%d %d]", path, name, a.Dtype(), a.Shape(), rows[name], d.Vocab)
			}
			var err error
			if *dst, err = a.Float32s(); err != nil {
				return fmt.Errorf("%s: %s: %w", path, name, err)
			}
		}
		if (r.LevelPrefill == nil) != (r.LevelDecode == nil) {
			return fmt.Errorf("%s: level_prefill_logits and level_decode_logits come together", path)
		}
		if (r.CachePrefill == nil) != (r.CacheDecode == nil) {
			return fmt.Errorf("%s: cache_prefill_logits and cache_decode_logits come together", path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Run = *d
	return &r, nil
}
