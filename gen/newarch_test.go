package gen

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// helium is a descriptor for an architecture archgen does not ship (Kyutai's
// Helium, from mlx-lm's models/helium.py), added the way a user would add
// one: a single YAML file.
const helium = `model_type: helium
doc: |
  Kyutai's Helium: Llama's layers with q, k and v biases per attention_bias
  (none on o), head_dim hidden_size / num_attention_heads whatever the config
  says, and a rope that rotates interleaved pairs.
extends: llama

config:
  keys:
    num_key_value_heads: {required: true}
    attention_bias: {required: true}
    mlp_bias: {required: true}
    head_dim: {type: int, required: true}
    max_position_embeddings: {type: int, required: true}
    rope_theta: {required: true}
    tie_word_embeddings: {required: true}
    rope_traditional: null
    rope_scaling: null
  derived:
    attn_head_dim: {type: int, expr: "hidden_size // num_attention_heads", min: 1}

structure:
  attention:
    head_dim: attn_head_dim
    scale: "attn_head_dim ** -0.5"
    bias: {o: false}
  rope:
    kind: plain
    dims: attn_head_dim
    traditional: true
    scaling: null
    max_positions: null

weights:
  drop:
    - {name: lm_head.weight, when: tie_word_embeddings}

test_config:
  hidden_size: 64
  num_hidden_layers: 2
  intermediate_size: 128
  num_attention_heads: 4
  num_key_value_heads: 2
  head_dim: 16
  rms_norm_eps: 1.0e-5
  vocab_size: 96
  attention_bias: true
  mlp_bias: false
  max_position_embeddings: 4096
  rope_theta: 10000
  tie_word_embeddings: false
`

// heliumVL wraps helium, as a vision-language checkpoint would: the
// registry lists it and builds with it.
const heliumVL = `model_type: helium_vl
doc: Helium's text model inside a vision-language checkpoint.
wrapper:
  section: text_config
  runs: helium
  top_wins: [vocab_size]
  prefixes: [{from: language_model., to: ""}]
  drop: [vision_tower]
`

// TestAddingAnArch adds one descriptor to a copy of descriptors/ in a
// module of its own that uses this one, generates, builds the new package
// and the registry, and runs the new package's tests: forward passes on a
// tiny random checkpoint.
func TestAddingAnArch(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	descs := filepath.Join(tmp, "descriptors")
	os.MkdirAll(filepath.Join(descs, FragmentsDir), 0o755)
	for _, sub := range []string{"", FragmentsDir} {
		paths, _ := filepath.Glob(filepath.Join(root, "descriptors", sub, "*.yaml"))
		for _, p := range paths {
			data, _ := os.ReadFile(p)
			os.WriteFile(filepath.Join(descs, sub, filepath.Base(p)), data, 0o644)
		}
	}
	os.WriteFile(filepath.Join(descs, "helium.yaml"), []byte(helium), 0o644)
	os.WriteFile(filepath.Join(descs, "helium_vl.yaml"), []byte(heliumVL), 0o644)
	const module = "example.com/newarch"
	gomod := "module " + module + "\n\ngo 1.26\n\nrequire github.com/archgen/archgen v0.0.0\n\nreplace github.com/archgen/archgen => " + root + "\n"
	os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(gomod), 0o644)
	if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
		os.WriteFile(filepath.Join(tmp, "go.sum"), sum, 0o644)
	}

	s, err := Load(descs, "descriptors")
	if err != nil {
		t.Fatal(err)
	}
	files, err := GenerateFor(s, module)
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(tmp, files); err != nil {
		t.Fatal(err)
	}
	if _, ok := files["generated/helium/forward.go"]; !ok {
		t.Fatal("no generated/helium")
	}
	if !regexp.MustCompile(`Runs:\s+"helium",`).Match(files["generated/registry/registry.go"]) {
		t.Fatal("the registry lists no helium_vl wrapper")
	}
	goTool := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goTool("vet", "./generated/helium/", "./generated/registry/")
	out := goTool("test", "-count=1", "-v", "./generated/helium/")
	for _, name := range []string{"TestForward", "TestCachedDecode", "TestQuantized", "TestLoadErrors"} {
		if !strings.Contains(out, "--- PASS: "+name) {
			t.Errorf("%s did not pass:\n%s", name, out)
		}
	}

	// Generated code of a version the runtime does not run fails to build.
	model := filepath.Join(tmp, "generated", "helium", "model.go")
	data, _ := os.ReadFile(model)
	guard := fmt.Sprintf("mlx.EnforceVersion(%d - mlx.MinGenVersion)", genVersion)
	if !bytes.Contains(data, []byte(guard)) {
		t.Fatalf("model.go has no %s", guard)
	}
	future := bytes.ReplaceAll(data, []byte(fmt.Sprint(genVersion)+" - mlx.MinGenVersion"), []byte("mlx.MaxGenVersion + 1 - mlx.MinGenVersion"))
	future = bytes.ReplaceAll(future, []byte("mlx.MaxGenVersion - "+fmt.Sprint(genVersion)), []byte("mlx.MaxGenVersion - (mlx.MaxGenVersion + 1)"))
	os.WriteFile(model, future, 0o644)
	cmd := exec.Command("go", "build", "./generated/helium/")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "EnforceVersion") {
		t.Errorf("a package generated for a newer runtime built: %v\n%s", err, out)
	}
}
