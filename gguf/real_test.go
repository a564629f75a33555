package gguf

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

// realModel is the checkpoint `make models` fetches.
const realModel = "../.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

// TestRealCheckpoint runs SmolLM2-135M-Instruct (llama.cpp's Q4_1 file)
// through its generated architecture and compares prefill logits and a
// greedy continuation with mlx-lm's on the directory WriteDir makes of it.
func TestRealCheckpoint(t *testing.T) {
	if _, err := os.Stat(realModel); err != nil {
		t.Fatalf("%v: run `make models`", err)
	}
	dir := t.TempDir()
	m, err := Read(realModel, nil, registry.Archs())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteDir(filepath.Join(dir, "model")); err != nil {
		t.Fatal(err)
	}
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("<|im_start|>user\nName three colours of the rainbow.<|im_end|>\n<|im_start|>assistant\n", false)
	model, err := m.Load(nn.Options{}, registry.Load)
	if err != nil {
		t.Fatal(err)
	}
	defer model.Free()
	g := mlx.NewGraph(nil)
	logits := g.AsType(g.Reshape(model.Forward(g, mlx.FromSlice(g, prompt, 1, len(prompt)), model.NewCaches()), len(prompt), -1), mlx.Float32)
	if err := g.Eval(logits); err != nil {
		t.Fatal(err)
	}
	v, _ := logits.Float32s()
	logitsFile := filepath.Join(dir, "logits.npy")
	if err := npy.WriteFile(logitsFile, npy.Array{Shape: logits.Shape(), Data: v}); err != nil {
		t.Fatal(err)
	}
	g.Close()
	var greedy []int32
	if _, err := generate.Tokens(context.Background(), model, prompt, generate.Options{MaxTokens: 16},
		func(id int32) error { greedy = append(greedy, id); return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("greedy: %q", tok.Decode(greedy, false))

	// Text: streamed pieces add up to the text, which is the decoded
	// greedy tokens cut before the first stop string.
	full := tok.Decode(greedy, true)
	stop := "Red"
	var pieces []string
	text, st, err := generate.Text(context.Background(), model, prompt, tok.NewStream(true), generate.TextOptions{
		Options:     generate.Options{MaxTokens: 16},
		StopStrings: []string{stop},
		OnText:      func(s string) error { pieces = append(pieces, s); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(full, stop)
	if cut < 0 || text != full[:cut] || strings.Join(pieces, "") != text || st.Finish != generate.FinishStop {
		t.Fatalf("text %q (pieces %q, finish %s); the greedy text is %q, stop %q", text, pieces, st.Finish, full, stop)
	}
	// float32 sums in another order: 1e-4 of the scale. Where the 4-bit
	// products round x to 16 bits per group of W (qmv16.h), each
	// value by up to 1/65534 of its group's largest: 2.1e-4 measured here,
	// so 1e-3; the greedy tokens must still be mlx-lm's.
	tol := 1e-4
	if mlx.NativeQMV16() {
		tol = 1e-3
	}
	spec, _ := json.Marshal(map[string]any{"prompt": prompt, "logits_file": logitsFile, "greedy": greedy, "tol": tol})
	specFile := filepath.Join(dir, "go.json")
	os.WriteFile(specFile, spec, 0o644)
	out, err := exec.Command(python(t), "testdata/check_real.py", filepath.Join(dir, "model"), specFile).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatal(err)
	}
}
