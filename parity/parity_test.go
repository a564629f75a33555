package parity

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/mlx"
	"github.com/archgen/archgen/runtime/nn"
)

var tablePath = flag.String("parity.table", "", "write the arch × case × level table to this file")

// result is one row of the table.
type result struct {
	arch, cas, level string
	res              *Result // nil when the level did not run
	pass             bool
	refused          bool // mlx-lm cannot run the level; neither can we
	note             string
}

// accuracyResult is one row of the default compute dtype's table.
type accuracyResult struct {
	arch, cas, level string
	acc              *Accuracy // nil when the level did not run
	pass             bool
	note             string
}

var (
	resultsMu       sync.Mutex
	results         []result
	accuracyResults []accuracyResult
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if *tablePath != "" {
		if err := os.WriteFile(*tablePath, []byte(table(results)+"\n"+accuracyTable(accuracyResults)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestParity runs every case at every level through the registry and
// checks it against mlx-lm with Check: prefill logits and teacher-forced
// decode logits within the level's tolerance, free-running greedy tokens
// equal to mlx-lm's up to its first near-tie. The levels run in the
// checkpoint's dtype (nn.CheckpointDtype), as mlx-lm computes them; every
// level but float32 runs again at the default compute dtype (subtest
// <level>/default), held by CheckAccuracy to mlx-lm's float32 run on its
// weights.
func TestParity(t *testing.T) {
	refsDir, models, idx := derived(t)
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
		if a.Encoder {
			// An encoder has no logits: archgen's TestEncoderMatchesMLXEmbeddings
			// checks it against mlx-embeddings' module instead.
			delete(want, a.Name)
			continue
		}
		want[a.Name] = true
		for _, al := range a.Aliases {
			want[al] = true
		}
	}
	// A wrapper's cases run the text model its config names through the
	// architecture it runs: they count for that architecture too (a text
	// model that mlx-lm reads only as a wrapper's section has no cases of
	// its own).
	for _, a := range registry.Archs() {
		if a.Wrapper != nil && byType[a.Name] > 0 {
			byType[a.Wrapper.Runs] += byType[a.Name]
			for _, d := range a.Wrapper.Dispatch {
				byType[d] += byType[a.Name]
			}
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
		var names []string
		for _, lv := range idx.Levels {
			names = append(names, lv.Name)
		}
		// the case's own extra levels (another quantization mode)
		for _, name := range extraLevels(idx, refs) {
			if _, ok := Tolerances[name]; !ok {
				t.Errorf("%s: level %s has no tolerance", c.Key(), name)
				continue
			}
			names = append(names, name)
		}
		for _, name := range names {
			t.Run(c.Key()+"/"+name, func(t *testing.T) {
				runCase(t, refsDir, models, c, refs, name)
			})
			if name != "float32" {
				t.Run(c.Key()+"/"+name+"/default", func(t *testing.T) {
					runAccuracy(t, models, c, refs, name)
				})
			}
		}
	}
}

// extraLevels are the levels of refs beyond the index's, sorted.
func extraLevels(idx *Index, refs *Refs) []string {
	var out []string
	for name := range refs.Levels {
		if !slices.ContainsFunc(idx.Levels, func(lv LevelInfo) bool { return lv.Name == name }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// derived loads the references' index and fails t unless out/parity holds
// the level dirs derived from them.
func derived(t *testing.T) (refsDir, models string, idx *Index) {
	t.Helper()
	refsDir, models = RefsDir(), ModelsDir()
	idx, err := LoadIndex(refsDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDerived(refsDir, models, idx); err != nil {
		t.Fatalf("%v: run `make parity-models` (it derives each level's model dir from testdata/parity)", err)
	}
	return refsDir, models, idx
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
	if why := refs.Levels[level].MLXLMRefuses; why != "" {
		r.refused = true
		r.note = refusedLevel(t, models, c, refs, level, why)
		return
	}
	if why := refs.Levels[level].LeftOut; why != "" {
		r.refused = true
		r.note = leftOutLevel(t, models, c, refs, level, why)
		return
	}
	want, err := LoadDumps(refsDir, c, level)
	if err != nil {
		t.Fatal(err)
	}
	m, err := registry.Load(LevelDir(models, c, level), nn.Options{Dtype: nn.CheckpointDtype})
	if err != nil {
		r.note = err.Error()
		t.Fatal(err)
	}
	defer m.Free()
	res, err := Check(m, refs, want, level)
	if err != nil {
		r.note = err.Error()
		t.Fatal(err)
	}
	r.res = res
	if p := res.Problems(want.Vocab); len(p) > 0 {
		r.note = p[0]
		t.Error(strings.Join(p, "\n"))
	}
}

// runAccuracy loads a case's level at the default compute dtype and holds
// it to mlx-lm's float32 run on the level's weights (CheckAccuracy).
func runAccuracy(t *testing.T, models string, c CaseInfo, refs *Refs, level string) {
	r := accuracyResult{arch: c.Arch, cas: c.Case, level: level}
	defer func() {
		r.pass = !t.Failed()
		resultsMu.Lock()
		accuracyResults = append(accuracyResults, r)
		resultsMu.Unlock()
	}()
	if why := refs.Levels[level].LeftOut; why != "" {
		r.note = "not compared: the case leaves the level out (" + why + ")"
		t.Skip(r.note)
	}
	run, err := LoadFloat32Run(models, c, level)
	if err != nil {
		r.note = err.Error()
		t.Fatalf("%v: run `make parity-models` (it runs mlx-lm in float32 on each level's weights)", err)
	}
	m, err := registry.Load(LevelDir(models, c, level), nn.Options{})
	if err != nil {
		r.note = err.Error()
		t.Fatal(err)
	}
	defer m.Free()
	if dt := m.Info().Dtype; dt != nn.DefaultDtype(mlx.CPU) {
		t.Errorf("loaded at the default dtype, the model computes in %s, want %s", dt, nn.DefaultDtype(mlx.CPU))
	}
	acc, err := CheckAccuracy(m, refs, run)
	if err != nil {
		r.note = err.Error()
		t.Fatal(err)
	}
	r.acc = acc
	if p := acc.Problems(); len(p) > 0 {
		r.note = p[0]
		t.Error(strings.Join(p, "\n"))
	}
}

// accuracyTable formats the default compute dtype's results like table.
func accuracyTable(rs []accuracyResult) string {
	sortRows(rs, func(r accuracyResult) [3]string { return [3]string{r.arch, r.cas, r.level} })
	var sb strings.Builder
	sb.WriteString("The default compute dtype (float32) against mlx-lm's float32 run on each level's weights, beside mlx-lm's own run at the level's dtype:\n")
	fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %10s %10s %4s %10s %4s %5s  %s\n",
		"arch", "case", "level", "prefill", "mlx-lm", "cache", "forced", "mlx-lm", "cache", "at", "bound", "tie", "free", "")
	pass := 0
	for _, r := range rs {
		status := "FAIL"
		if r.pass {
			status = "pass"
			pass++
		}
		if r.acc == nil {
			fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %10s %10s %4s %10s %4s %5s  %s %s\n",
				r.arch, r.cas, r.level, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", status, r.note)
			continue
		}
		a := r.acc
		w := a.Worst()
		s := a.Steps[w]
		tie := "-"
		if a.NearTie < len(a.Steps) {
			tie = fmt.Sprint(a.NearTie)
		}
		fmt.Fprintf(&sb, "%-12s %-18s %-9s %10.3g %10s %10s %10.3g %10s %10s %4d %10.3g %4s %2d/%-2d  %s %s\n",
			r.arch, r.cas, r.level, a.Prefill.Rel(), relOrNone(a.LevelPrefill), relOrNone(a.CachePrefill), s.Rel(), relOrNone(s.Level),
			relOrNone(s.Cache), w, s.Bound(), tie, a.FreeEqual, len(a.Steps), status, r.note)
	}
	fmt.Fprintf(&sb, "%d of %d pass\n", pass, len(rs))
	sb.WriteString("prefill, forced: our distance from mlx-lm's float32 run, relative to the scale; mlx-lm: its own run's at the level's dtype; " +
		"cache: its float32 run's with caches holding the level's half-precision dtype, as ours do\n" +
		"at, bound: the step nearest its bound (max(slack x mlx-lm's, the float32 tolerance, slack x cache); RefusedLevelBound in place of the first two where mlx-lm refuses the level, shown -)\n" +
		"tie, free: the float32 run's first near-tie step; the free-running tokens equal to its picks, from the first\n")
	return sb.String()
}

func relOrNone(d *Diff) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%.3g", d.Rel())
}

// sortRows sorts rows by arch, case and the index's level order, as key
// gives them.
func sortRows[R any](rs []R, key func(R) [3]string) {
	order := levelOrder()
	sort.Slice(rs, func(i, j int) bool {
		a, b := key(rs[i]), key(rs[j])
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		if a[1] != b[1] {
			return a[1] < b[1]
		}
		return order[a[2]] < order[b[2]]
	})
}

// levelOrder maps each level of the index to its place.
func levelOrder() map[string]int {
	order := map[string]int{}
	if idx, err := LoadIndex(RefsDir()); err == nil {
		for i, lv := range idx.Levels {
			order[lv.Name] = i
		}
	}
	return order
}

// table formats the results, sorted by arch, case and the index's level
// order.
func table(rs []result) string {
	sortRows(rs, func(r result) [3]string { return [3]string{r.arch, r.cas, r.level} })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %4s %8s %4s %5s  %s\n",
		"arch", "case", "level", "prefill", "prefill", "forced", "forced", "at", "tol", "tie", "free", "")
	fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %4s %8s %4s %5s  %s\n",
		"", "", "", "max abs", "rel", "max abs", "rel", "step", "rel", "step", "equal", "")
	pass := 0
	for _, r := range rs {
		status := "FAIL"
		switch {
		case r.pass && r.refused:
			status = "n/a"
		case r.pass:
			status = "pass"
			pass++
		}
		if r.res == nil {
			fmt.Fprintf(&sb, "%-12s %-18s %-9s %10s %10s %10s %10s %4s %8s %4s %5s  %s %s\n",
				r.arch, r.cas, r.level, "-", "-", "-", "-", "-", "-", "-", "-", status, r.note)
			continue
		}
		x := r.res
		w := x.Worst()
		tie := "-"
		if x.NearTie < len(x.Steps) {
			tie = fmt.Sprint(x.NearTie)
		}
		fmt.Fprintf(&sb, "%-12s %-18s %-9s %10.3g %10.3g %10.3g %10.3g %4d %8.3g %4s %2d/%-2d  %s %s\n",
			r.arch, r.cas, r.level, x.Prefill.MaxAbs, x.Prefill.Rel(), w.MaxAbs, w.Rel(), x.WorstStep(), x.Tol.Rel,
			tie, x.FreeEqual, len(x.Steps), status, r.note)
	}
	fmt.Fprintf(&sb, "%d of %d pass\n", pass, len(rs))
	sb.WriteString("forced: the decode fed mlx-lm's picks; its worst step (at) relative to that step's largest |logit|\n" +
		"tie:    mlx-lm's first near-tie step, its top-1 minus top-2 logit below tol times the step's scale (- for none)\n" +
		"free:   the free-running greedy tokens equal to mlx-lm's, from the first; every step before tie must be\n")
	return sb.String()
}
