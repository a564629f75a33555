package parity

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/archgen/archgen/generate"
	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

var tablePath = flag.String("parity.table", "", "write the arch × case × level table to this file")

// result is one row of the table.
type result struct {
	arch, cas, level string
	prefill, decode  Diff
	tokensOK, steps  int
	tol              float64
	pass             bool
	note             string
}

var (
	resultsMu sync.Mutex
	results   []result
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if *tablePath != "" {
		if err := os.WriteFile(*tablePath, []byte(table(results)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestParity runs every case at every level through the registry and
// compares with mlx-lm: prefill logits and decode logits within the level's
// tolerance, greedy tokens exactly.
func TestParity(t *testing.T) {
	refsDir, models := RefsDir(), ModelsDir()
	idx, err := LoadIndex(refsDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDerived(refsDir, models, idx); err != nil {
		t.Fatalf("%v: run `make parity-models` (it derives each level's model dir from testdata/parity)", err)
	}
	// Every descriptor, and every alias a descriptor declares, has cases.
	byType := map[string]int{}
	for _, c := range idx.Cases {
		if _, err := registry.Lookup(c.Arch); err != nil {
			t.Errorf("case %s: %v", c.Key(), err)
			continue
		}
		byType[c.Arch]++ // an alias's cases count for the alias, not its target
	}
	files, err := filepath.Glob(filepath.Join(Root(), "descriptors", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".yaml"); name != "registry" {
			want[name] = true
		}
	}
	for _, a := range registry.Archs() {
		want[a.Name] = true
		for _, al := range a.Aliases {
			want[al] = true
		}
	}
	for name := range want {
		if byType[name] == 0 {
			t.Errorf("%s has no parity case in %s: add one to parity/refgen/cases.py and run `make refs`", name, refsDir)
		}
	}
	for _, lv := range idx.Levels {
		if _, ok := Tolerances[lv.Name]; !ok {
			t.Errorf("level %s has no tolerance", lv.Name)
		}
	}
	for _, c := range idx.Cases {
		refs, err := LoadRefs(refsDir, c)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, lv := range idx.Levels {
			t.Run(c.Key()+"/"+lv.Name, func(t *testing.T) {
				runCase(t, refsDir, models, c, refs, lv.Name)
			})
		}
	}
}

// checkDerived reports level dirs missing from models, or derived from
// other references than refsDir's: each case's float32 level is a byte copy
// of its committed float32 checkpoint.
func checkDerived(refsDir, models string, idx *Index) error {
	for _, c := range idx.Cases {
		for _, f := range []string{"config.json", "model.safetensors"} {
			got, err := os.ReadFile(filepath.Join(LevelDir(models, c, "float32"), f))
			if err != nil {
				return err
			}
			want, err := os.ReadFile(filepath.Join(refsDir, c.Arch, c.Case, "model", f))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%s is stale: its float32 %s differs from the committed one", LevelDir(models, c, "float32"), f)
			}
		}
	}
	return nil
}

func runCase(t *testing.T, refsDir, models string, c CaseInfo, refs *Refs, level string) {
	r := result{arch: c.Arch, cas: c.Case, level: level}
	defer func() {
		r.pass = !t.Failed()
		resultsMu.Lock()
		results = append(results, r)
		resultsMu.Unlock()
	}()
	tol, ok := Tolerances[level]
	if !ok {
		t.Fatalf("no tolerance for level %s", level)
	}
	r.tol = tol.Rel
	want, err := LoadDumps(refsDir, c, level)
	if err != nil {
		t.Fatal(err)
	}
	dir := LevelDir(models, c, level)
	m, err := registry.Load(dir, nn.Options{})
	if err != nil {
		r.note = err.Error()
		t.Fatal(err)
	}
	defer m.Free()

	got, _, err := Prefill(m, want.Prompt)
	if err != nil {
		r.note = err.Error()
		t.Fatalf("prefill: %v", err)
	}
	if r.prefill, err = Compare(got, want.Prefill); err != nil {
		t.Fatalf("prefill: %v", err)
	}
	if r.prefill.Rel() > tol.Rel {
		pos, tok := r.prefill.At/want.Vocab, r.prefill.At%want.Vocab
		t.Errorf("prefill logits: max abs error %.3g (%.3g of the scale %.3g) at position %d, token %d; tolerance %.3g (%s)",
			r.prefill.MaxAbs, r.prefill.Rel(), r.prefill.Scale, pos, tok, tol.Rel, tol.Reason)
	}

	n := len(want.DecodeTokens)
	picks, rows, err := Greedy(m, want.Prompt, refs.DecodeCalls, n, want.DecodeTokens)
	if err != nil {
		r.note = err.Error()
		t.Fatalf("decode: %v", err)
	}
	r.steps = n
	var bad []string
	for i := range picks {
		if picks[i] == want.DecodeTokens[i] {
			r.tokensOK++
			continue
		}
		margin := refs.Levels[level].DecodeMargins[i]
		bad = append(bad, fmt.Sprintf("step %d picked %d, mlx-lm %d (mlx-lm's margin %.3g)", i, picks[i], want.DecodeTokens[i], margin))
	}
	if len(bad) > 0 {
		r.note = bad[0]
		t.Errorf("greedy tokens differ from mlx-lm's %v:\n  %s", want.DecodeTokens, strings.Join(bad, "\n  "))
	}
	// The product's own decode loop, free-running, must pick the same tokens.
	var free []int32
	if _, err := generate.Tokens(context.Background(), m, want.Prompt, generate.Options{MaxTokens: n},
		func(t int32) error { free = append(free, t); return nil }); err != nil {
		t.Errorf("generate.Tokens: %v", err)
	} else if !slices.Equal(free, want.DecodeTokens) {
		t.Errorf("generate.Tokens picked %v, mlx-lm %v", free, want.DecodeTokens)
	}
	if r.decode, err = Compare(rows, want.Decode); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if r.decode.Rel() > tol.Rel {
		t.Errorf("decode logits: max abs error %.3g (%.3g of the scale %.3g) at step %d, token %d; tolerance %.3g",
			r.decode.MaxAbs, r.decode.Rel(), r.decode.Scale, r.decode.At/want.Vocab, r.decode.At%want.Vocab, tol.Rel)
	}
}

// table formats the results, sorted by arch, case and the index's level
// order.
func table(rs []result) string {
	order := map[string]int{}
	if idx, err := LoadIndex(RefsDir()); err == nil {
		for i, lv := range idx.Levels {
			order[lv.Name] = i
		}
	}
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.arch != b.arch {
			return a.arch < b.arch
		}
		if a.cas != b.cas {
			return a.cas < b.cas
		}
		return order[a.level] < order[b.level]
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %8s %6s  %s\n",
		"arch", "case", "level", "prefill", "prefill", "decode", "decode", "tol", "tokens", "")
	fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %8s %6s  %s\n",
		"", "", "", "max abs", "rel", "max abs", "rel", "rel", "", "")
	pass := 0
	for _, r := range rs {
		status := "FAIL"
		if r.pass {
			status = "pass"
			pass++
		}
		fmt.Fprintf(&sb, "%-12s %-18s %-9s %10.3g %10.3g %10.3g %10.3g %8.3g %3d/%-2d  %s %s\n",
			r.arch, r.cas, r.level, r.prefill.MaxAbs, r.prefill.Rel(), r.decode.MaxAbs, r.decode.Rel(), r.tol,
			r.tokensOK, r.steps, status, r.note)
	}
	fmt.Fprintf(&sb, "%d of %d pass\n", pass, len(rs))
	return sb.String()
}
