package parity

import (
	"os"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
)

// TestSequentialNeoXRefused: a GPT-NeoX config with sequential layers
// (use_parallel_residual false), which mlx-lm runs and no published
// checkpoint of the family has, is refused by name, not run as parallel.
func TestSequentialNeoXRefused(t *testing.T) {
	a, err := registry.Lookup("gpt_neox")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../testdata/parity/gpt_neox/base/model/config.json")
	if err != nil {
		t.Fatal(err)
	}
	config = []byte(strings.Replace(string(config), `"use_parallel_residual": true`, `"use_parallel_residual": false`, 1))
	if !strings.Contains(string(config), `"use_parallel_residual": false`) {
		t.Fatal("the case's config holds no use_parallel_residual to turn off")
	}
	_, err = a.Config(config)
	want := "use_parallel_residual: false (sequential layers) is not supported: the layers here are parallel"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}
