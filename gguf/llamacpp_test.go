package gguf

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/runtime/nn"
)

// llamaTools is where `make setup-llama-tools` puts llama.cpp's tools and
// bench/llama-logits.
const llamaTools = "../.deps/llama-tools/bin"

// llamaTypes are the files make_llama_cases.py makes of each random case,
// realTypes those of the real checkpoint.
var llamaTypes = []string{"F32", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
	"Q6_K", "IQ4_NL", "IQ4_XS", "Q3_K_M", "Q4_K_M", "Q5_K_M"}
var realTypes = []string{"F32", "Q4_1", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS"}

// TestLlamaCppParity: GGUF files quantized by llama.cpp's own
// llama-quantize, to every block type archgen reads (one type throughout,
// and llama.cpp's _M mixtures), run by archgen at its defaults against
// llama.cpp's logits on the same files (bench/llama-logits). The real
// SmolLM2-135M-Instruct Q4_1 file is among them, with its requantizations
// to the types people download (rows of 576 values: llama.cpp falls back to
// Q5_0, Q5_1 or Q8_0 where a K-quant's 256 do not divide them, as in the
// published K-quant files of this model).
//
// The reference for accuracy is llama.cpp on the float32 file. On each
// quantized file archgen's logits may be no further from it than
// llama.cpp's own on that file are (the weights' error, which both carry,
// plus llama.cpp's arithmetic: it rounds activations to 8 bits for its
// quantized products, archgen keeps them on a 16-bit grid): over all
// logits (root mean square) with a slack of 10%, and in the largest single
// difference (which one logit decides, where either run's arithmetic
// happens to add to or take from the error both carry) with a slack of
// 25%, each with the float32 file's own distance (the arithmetic alone)
// beside it; on the float32 file, less than a tenth of llama.cpp's
// largest difference on Q8_0. The
// teacher-forced greedy tokens are llama.cpp's on the same file wherever
// its top two logits are further apart than the two runs' distances allow.
// Each file's tensors load held as stored: the weights' bytes are the
// file's tensor bytes, and the biases MLX's affine form adds to Q4_0 and
// Q8_0 blocks.
func TestLlamaCppParity(t *testing.T) {
	for _, tool := range []string{"llama-quantize", "llama-logits"} {
		if _, err := os.Stat(filepath.Join(llamaTools, tool)); err != nil {
			t.Fatalf("%v: run `make setup-llama-tools`", err)
		}
	}
	if _, err := os.Stat(realModel); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	dir := t.TempDir()
	run(t, "testdata/make_llama_cases.py", dir, llamaTools, realModel)
	for _, c := range []string{"llama", "llama3", "phi3", "qwen2", "qwen3", "olmo2", "seed_oss", "smollm3", "granite", "hunyuan", "qwen3moe", "qwen2moe", "olmoe", "mixtral", "gemma", "gemma2", "gemma3", "starcoder2", "stablelm", "command-r", "phi2", "nemotron", "olmo3", "exaone4", "exaone", "glm4", "ernie4_5", "qwen2vl", "qwen3vl", "qwen3vlmoe", "gpt-oss", "granitemoe", "cohere2", "dots1", "glm4moe", "apertus", "deepseek", "minimax-m2", "gpt2", "starcoder", "qwen", "gptneox", "qwen35", "qwen35moe", "lfm2", "lfm2moe", "ministral3", "mistral3", "ernie4_5-moe", "deepseek2", "mamba2", "mamba", "granitehybrid", "nemotron_h", "nemotron_h_moe", "gemma4", "gemma4_e", "exaone-moe", "qwen3next", "falcon-h1", "bailingmoe2", "mellum", "minicpm", "internlm2", "bailingmoe", "minicpm3", "real"} {
		types := llamaTypes
		switch c {
		case "real":
			types = realTypes
		case "gpt-oss":
			types = append(slices.Clone(llamaTypes), "MXFP4_MOE") // experts as published
		}
		checkLlamaCase(t, filepath.Join(dir, c), c, types)
	}
}

// checkLlamaCase runs archgen on each of a case's files (make_llama_cases.py's
// dir/<case>) against llama.cpp's logits, as TestLlamaCppParity says.
func checkLlamaCase(t *testing.T, dir, c string, types []string) {
	var tokens []int32
	b, err := os.ReadFile(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &tokens)
	ref := readLogits(t, filepath.Join(dir, "logits-F32.npy"))
	// what 8-bit weights cost llama.cpp on this case
	q8 := maxDiff(readLogits(t, filepath.Join(dir, "logits-Q8_0.npy")), ref)
	var floor, rmsFloor float64 // archgen's distances on the float32 file
	for _, typ := range types {
		t.Run(c+"/"+typ, func(t *testing.T) {
			path := filepath.Join(dir, "model-"+typ+".gguf")
			ours, _, info := fileLogits(t, path, nn.Options{}, tokens)
			fileBytes, biasBytes := tensorBytes(t, path)
			if info.Nbytes != fileBytes+biasBytes {
				t.Errorf("the weights take %d bytes, the file's tensors %d and the biases of its Q4_0 and Q8_0 blocks %d", info.Nbytes, fileBytes, biasBytes)
			}
			checkPartsDir(t, path, tokens, ours, q8/10)
			theirs := readLogits(t, filepath.Join(dir, "logits-"+typ+".npy"))
			if len(ours) != len(ref) || len(theirs) != len(ref) {
				t.Fatalf("%d logits, llama.cpp's %d and %d", len(ours), len(theirs), len(ref))
			}
			dOurs, dTheirs, scale := maxDiff(ours, ref), maxDiff(theirs, ref), maxAbs(ref)
			if typ == "F32" {
				checkUnread(t, path)
				floor, rmsFloor = dOurs, rmsDiff(ours, ref)
				// the same weights: only the arithmetic differs (summation
				// order, llama.cpp's vectorized exp in SiLU and softmax),
				// by less than a tenth of what 8-bit weights cost
				if tol := q8 / 10; dOurs > tol {
					t.Fatalf("float32 file: archgen is %g from llama.cpp (largest logit %g), allowed %g (a tenth of llama.cpp's distance on Q8_0)", dOurs, scale, tol)
				}
			} else {
				// over all logits (root mean square): no further than
				// llama.cpp, up to 10%; the largest single difference, which
				// one logit where the two runs' arithmetic happens to add to
				// or take from the weights' shared error decides, up to 25%
				rOurs, rTheirs := rmsDiff(ours, ref), rmsDiff(theirs, ref)
				if bound := 1.1*rTheirs + rmsFloor; rOurs > bound {
					t.Errorf("archgen is %g from llama.cpp's float32 run (root mean square), llama.cpp itself %g on this file: allowed %g", rOurs, rTheirs, bound)
				}
				if bound := 1.25*dTheirs + floor; dOurs > bound {
					t.Errorf("archgen is %g from llama.cpp's float32 run (largest difference), llama.cpp itself %g on this file: allowed %g", dOurs, dTheirs, bound)
				}
				t.Logf("root mean square distance from llama.cpp's float32 run: archgen %.4g, llama.cpp %.4g", rOurs, rTheirs)
			}
			t.Logf("distance from llama.cpp's float32 run: archgen %.4g, llama.cpp %.4g (largest logit %.3g)", dOurs, dTheirs, scale)
			vocab := len(ref) / len(tokens)
			for p := range tokens {
				a, b := argmax(ours[p*vocab:(p+1)*vocab]), argmax(theirs[p*vocab:(p+1)*vocab])
				row := theirs[p*vocab : (p+1)*vocab]
				if a != b && float64(row[b]-row[a]) > dOurs+dTheirs {
					t.Errorf("position %d: archgen's token %d, llama.cpp's %d (%g ahead)", p, a, b, row[b]-row[a])
				}
			}
		})
	}
}

// checkPartsDir: where the file holds a joined projection as parts of
// different types, the model dir WriteDir makes of it (the parts decoded
// and joined as one float32 weight) gives the file's logits, up to tol.
func checkPartsDir(t *testing.T, path string, tokens []int32, ours []float32, tol float64) {
	t.Helper()
	m, err := Read(path, nil, registry.Archs())
	if err != nil {
		t.Fatal(err)
	}
	q, _ := m.Config["quantization"].(map[string]any)
	if !slices.ContainsFunc(slices.Collect(maps.Values(q)), func(e any) bool {
		spec, ok := e.(map[string]any)
		return ok && spec["parts"] != nil
	}) {
		return
	}
	dir := t.TempDir()
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	model, err := registry.Load(dir, nn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer model.Free()
	v, _ := modelLogits(t, model, tokens)
	d := maxDiff(v, ours)
	t.Logf("the model dir WriteDir makes (its parts joined): %.3g from the file's logits", d)
	if d > tol {
		t.Errorf("the model dir WriteDir makes (its parts joined) is %g from the file's logits, allowed %g", d, tol)
	}
}

// checkUnread: the tensors of the last layers that the model does not run
// (GGUF.UnreadCount) are not read at all, not merely left unused.
func checkUnread(t *testing.T, path string) {
	t.Helper()
	h, err := ReadHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	arch := h.Strings["general.architecture"]
	md := metadata{path: path, raw: h.Values}
	modelType, a, ok := find(registry.Archs(), arch, md)
	if !ok || a.UnreadCount == "" {
		return
	}
	names, count := unreadOf(t, h, md, arch, modelType, a)
	if count == 0 {
		return // no layer shares
	}
	if len(names) == 0 {
		t.Fatalf("%s holds no tensors its last %s layers do not run: the case does not check them", path, a.UnreadCount)
	}
	m, err := Read(path, nil, registry.Archs())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	for _, n := range names {
		parts := blockName.FindStringSubmatch(n)
		if hf := a.Layers + "." + parts[1] + "." + a.Tensors[parts[2]] + ".weight"; m.Tensors[hf] != nil {
			t.Errorf("%s (llama.cpp's %s) was read, which the model does not run", hf, n)
		}
	}
}

// unreadOf is the tensors (llama.cpp's names) of the last layers the
// model does not run, as the reader's own config of the file says, and
// that config's count of those layers.
func unreadOf(t *testing.T, h *Header, md metadata, arch, modelType string, a *nn.GGUF) ([]string, int) {
	t.Helper()
	arrays := map[string]tensor{}
	for _, ti := range h.Tensors {
		arrays[ti.Name] = tensor{}
	}
	cfg, err := config(md, arch, modelType, a, arrays)
	if err != nil {
		t.Fatal(err)
	}
	return unread(arrays, cfg, a), wholeNumber(cfg[a.UnreadCount])
}

// tensorBytes is the bytes of the file's tensor data (the rope factors
// and the blocks the model does not run aside, the numbers a layer its
// metadata holds for tensors added),
// by its header, and
// the float16 biases MLX's affine form adds to its Q4_0 and Q8_0 blocks
// (two bytes a block of 32).
func tensorBytes(t *testing.T, path string) (int, int) {
	t.Helper()
	h, err := ReadHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	// the blocks past the model's layers (multi-token prediction), which
	// the checkpoint does not hold
	layers := math.MaxInt
	arch := h.Strings["general.architecture"]
	md := metadata{path: path, raw: h.Values}
	total, biases := 0, 0
	skip := map[string]bool{} // tensors of the last layers the model does not run
	if modelType, a, ok := find(registry.Archs(), arch, md); ok {
		if a.UnreadCount != "" {
			names, _ := unreadOf(t, h, md, arch, modelType, a)
			for _, n := range names {
				skip[n] = true
			}
		}
		if a.ExtraLayers != "" && md.has(arch+"."+a.ExtraLayers) {
			blocks, _ := md.int(arch + ".block_count")
			extra, _ := md.int(arch + "." + a.ExtraLayers)
			layers = blocks - extra
		}
		// the numbers a layer the metadata holds, made float32 tensors
		for k := range a.LayerValues {
			total += 4 * len(h.Values[k].Nums)
		}
	}
	for _, ti := range h.Tensors {
		if ti.Name == ropeFreqs || ti.Name == ropeLong || ti.Name == ropeShort || skip[ti.Name] {
			continue // read into the config's rope_scaling, or not run
		}
		if m := blockIndex.FindStringSubmatch(ti.Name); m != nil {
			if i, _ := strconv.Atoi(m[1]); i >= layers {
				continue
			}
		}
		_, _, _, n, err := layout(h, ti)
		if err != nil {
			t.Fatal(err)
		}
		total += int(n)
		if ti.Type == 2 || ti.Type == 8 {
			biases += int(n) / affineTypes[ti.Type].bytes * 2
		}
	}
	return total, biases
}

func readLogits(t *testing.T, path string) []float32 {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := a.Data.([]float32)
	if !ok {
		t.Fatalf("%s: %T, want float32", path, a.Data)
	}
	return v
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func rmsDiff(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(a)))
}

func maxAbs(a []float32) float64 {
	d := 0.0
	for _, v := range a {
		d = math.Max(d, math.Abs(float64(v)))
	}
	return d
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
