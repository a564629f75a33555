// Command paritycheck runs every parity case at every level (out/parity,
// from make parity-models) through the generated models and compares them
// with mlx-lm's references (testdata/parity) within parity.Tolerances:
// prefill logits, and greedy tokens, which must match exactly. The speed
// work runs it with the shim's native kernels on and off
// (ARCHGEN_MLX_NATIVE_QMM=0 for the linear layers, ARCHGEN_MLX_NATIVE_FAST=0
// for norms, rope and attention) to show that they keep parity.
//
//	go run ./bench/paritycheck
package main

import (
	"fmt"
	"os"
	"slices"

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
	fmt.Println("every case level within tolerance, every greedy token equal")
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
	got, _, err := parity.Prefill(m, refs.Prompt)
	if err != nil {
		return "prefill: " + err.Error(), false
	}
	diff, err := parity.Compare(got, d.Prefill)
	if err != nil {
		return err.Error(), false
	}
	toks, _, err := parity.Greedy(m, refs.Prompt, refs.DecodeCalls, len(d.DecodeTokens), nil)
	if err != nil {
		return "decode: " + err.Error(), false
	}
	tol := parity.Tolerances[level].Rel
	ok := diff.Rel() <= tol && slices.Equal(toks, d.DecodeTokens)
	return fmt.Sprintf("prefill rel %.2e (tol %.0e), tokens equal %v", diff.Rel(), tol, slices.Equal(toks, d.DecodeTokens)), ok
}
