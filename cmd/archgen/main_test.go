package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func archgen(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckOnTheRepository(t *testing.T) {
	if code, out, errs := archgen("-root", "../..", "-check"); code != 0 {
		t.Fatalf("archgen -check: exit %d\n%s%s", code, out, errs)
	}
}

func TestGenerateAndCheck(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "descriptors", "fragments"), 0o755)
	for _, f := range []string{"toy.yaml", "toychild.yaml", "registry.yaml", "fragments/sliding.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../gen/testdata/golden/toy/descriptors", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(root, "descriptors", f), data, 0o644)
	}
	code, out, errs := archgen("-root", root, "-check")
	if code != 1 || !strings.Contains(out, "+++ b/generated/toy/forward.go") || !strings.Contains(errs, "generated/ is stale") {
		t.Fatalf("-check before generating: exit %d\n%.400s\n%s", code, out, errs)
	}
	if code, _, errs := archgen("-root", root); code != 0 {
		t.Fatalf("generate: exit %d: %s", code, errs)
	}
	if code, out, _ := archgen("-root", root, "-check"); code != 0 || out != "" {
		t.Fatalf("-check after generating: exit %d\n%s", code, out)
	}
	os.Remove(filepath.Join(root, "descriptors", "toychild.yaml"))
	code, out, _ = archgen("-root", root, "-check")
	if code != 1 || !strings.Contains(out, "--- a/generated/toychild/model.go\n+++ /dev/null") {
		t.Fatalf("-check after removing a descriptor: exit %d\n%.400s", code, out)
	}
	archgen("-root", root)
	if _, err := os.Stat(filepath.Join(root, "generated", "toychild")); !os.IsNotExist(err) {
		t.Error("generated/toychild was not removed")
	}

	code, out, _ = archgen("-root", root, "list")
	if code != 0 || !strings.Contains(out, "toy         smoke  toy_alias  -") || !strings.Contains(out, "refused: toy_drafter (a drafter), toy_legacy (an alias of toy_v0)") {
		t.Errorf("list: exit %d\n%s", code, out)
	}
	code, out, _ = archgen("-root", root, "explain", "toy_alias")
	if code != 0 || !strings.HasPrefix(out, "toy (descriptors/toy.yaml, includes sliding)") {
		t.Errorf("explain: exit %d\n%.200s", code, out)
	}
	if code, _, errs := archgen("-root", root, "explain", "nope"); code != 2 || errs != "archgen: no descriptor or alias \"nope\"\n" {
		t.Errorf("explain nope: exit %d, %q", code, errs)
	}
	if code, _, _ := archgen("-root", root, "frobnicate"); code != 2 {
		t.Errorf("an unknown command: exit %d", code)
	}

	os.WriteFile(filepath.Join(root, "descriptors", "toy.yaml"), []byte("model_type: toy\nstructure:\n  mlp: {kind: gegl}\n"), 0o644)
	code, _, errs = archgen("-root", root)
	if want := "descriptors/toy.yaml:3: structure.mlp.kind: unknown \"gegl\" (want one of fused_gelu_gated, fused_swiglu, gelu, gelu_gated, gelu_tanh, gelu_tanh_gated, relu2, shifted_relu2, swiglu, xielu)\n"; code != 2 || errs != want {
		t.Errorf("a bad descriptor: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(root, "generated", "toy", "model.go")); err != nil {
		t.Error("a failed run removed files")
	}
}
