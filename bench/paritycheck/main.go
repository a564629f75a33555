// Command paritycheck runs every parity case at every level (out/parity,
// from make parity-models) through the generated models and compares them
// with mlx-lm's references (testdata/parity) by parity.Check: prefill and
// teacher-forced decode logits within parity.Tolerances, free-running
// greedy tokens equal to mlx-lm's up to its first near-tie. The speed
// work runs it with the shim's native kernels on and off
// (ARCHGEN_MLX_NATIVE_QMM=0 for the linear layers, ARCHGEN_MLX_NATIVE_FAST=0
// for norms, rope and attention) to show that they keep parity.
//
//	go run ./bench/paritycheck
package main

import (
	"fmt"
	"os"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/parity"
	"github.com/archgen/archgen/runtime/nn"
)

func main() {
	dir := parity.RefsDir()
	idx, err := parity.LoadIndex(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bad := 0
	for _, c := range idx.Cases {
		refs, err := parity.LoadRefs(dir, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, lv := range idx.Levels {
			msg, ok := check(dir, c, lv.Name, refs)
			if !ok {
				bad++
			}
			fmt.Printf("%-28s %-9s %s\n", c.Key(), lv.Name, msg)
		}
	}
	if bad > 0 {
		fmt.Printf("%d case levels out of parity\n", bad)
		os.Exit(1)
	}
	fmt.Println("every case level within tolerance, greedy tokens equal up to mlx-lm's near-ties")
}

func check(dir string, c parity.CaseInfo, level string, refs *parity.Refs) (string, bool) {
	m, err := registry.Load(parity.LevelDir(parity.ModelsDir(), c, level), nn.Options{})
	if err != nil {
		return "load: " + err.Error(), false
	}
	defer m.Free()
	d, err := parity.LoadDumps(dir, c, level)
	if err != nil {
		return err.Error(), false
	}
	r, err := parity.Check(m, refs, d, level)
	if err != nil {
		return err.Error(), false
	}
	msg := fmt.Sprintf("prefill rel %.2e, teacher-forced rel %.2e (tol %.0e), free tokens %d/%d equal (near-tie at %d)",
		r.Prefill.Rel(), r.Worst().Rel(), r.Tol.Rel, r.FreeEqual, len(r.Steps), r.NearTie)
	if p := r.Problems(d.Vocab); len(p) > 0 {
		msg += ": " + p[0]
	}
	return msg, r.Pass()
}
