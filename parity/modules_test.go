package parity

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
)

// TestMLXLMModules compares mlx-lm's model modules (its own package's
// mlx_lm/models/*.py, as make setup installs it) with the architectures
// archgen runs: every module is a registered model_type or alias, or a
// line of left_out.tsv, which says why not; and every line of left_out.tsv
// names a module mlx-lm has and archgen does not run. It logs how many
// modules each side holds.
func TestMLXLMModules(t *testing.T) {
	dirs, _ := filepath.Glob("../.deps/py/lib/python3*/site-packages/mlx_lm/models")
	if len(dirs) != 1 {
		t.Fatalf("mlx-lm's models folder: found %v (make setup installs mlx-lm)", dirs)
	}
	files, err := filepath.Glob(filepath.Join(dirs[0], "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	var modules []string
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".py"); !strings.HasPrefix(name, "__") {
			modules = append(modules, name)
		}
	}
	ours := map[string]bool{}
	for _, a := range registry.Archs() {
		ours[a.Name] = true
		for _, x := range a.Aliases {
			ours[x] = true
		}
	}
	left := map[string]string{}
	f, err := os.Open("left_out.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		module, why, ok := strings.Cut(line, "\t")
		if !ok || why == "" {
			t.Errorf("left_out.tsv:%d: want a module, a tab and why it is left out", n)
			continue
		}
		left[module] = why
	}
	run, out := 0, 0
	for _, m := range modules {
		switch _, listed := left[m]; {
		case ours[m] && listed:
			t.Errorf("%s: archgen runs it, and left_out.tsv still lists it", m)
		case ours[m]:
			run++
		case listed:
			out++
		default:
			t.Errorf("%s: a module of mlx-lm that archgen neither runs nor lists in left_out.tsv", m)
		}
	}
	for m := range left {
		if !slices.Contains(modules, m) {
			t.Errorf("left_out.tsv lists %s, which mlx-lm does not have", m)
		}
	}
	t.Logf("mlx-lm's %d modules: %d run here, %d left out (left_out.tsv)", len(modules), run, out)
}
