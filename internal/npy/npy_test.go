package npy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// TestNumpyRoundTrip writes arrays of every supported dtype, has numpy read
// them and write back arr * 2 (bool: not arr), and reads numpy's files.
func TestNumpyRoundTrip(t *testing.T) {
	py, err := filepath.Abs("../../.deps/py/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup`", err)
	}
	dir := t.TempDir()
	in := map[string]Array{
		"f32":    {Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6.5}},
		"f64":    {Shape: []int{3}, Data: []float64{1, -2, 3}},
		"i32":    {Shape: []int{1, 2}, Data: []int32{-7, 9}},
		"i64":    {Shape: []int{2}, Data: []int64{1 << 40, -3}},
		"u32":    {Shape: []int{2}, Data: []uint32{4, 1 << 31}},
		"u8":     {Shape: []int{2}, Data: []uint8{0, 100}},
		"bool":   {Shape: []int{3}, Data: []bool{true, false, true}},
		"scalar": {Shape: []int{}, Data: []float32{2.5}},
	}
	for name, a := range in {
		if err := WriteFile(filepath.Join(dir, name+".npy"), a); err != nil {
			t.Fatal(err)
		}
	}
	script := `
import sys, glob, os, numpy as np
for p in glob.glob(os.path.join(sys.argv[1], "*.npy")):
    a = np.load(p)
    out = ~a if a.dtype == np.bool_ else a * a.dtype.type(2)
    np.save(p[:-4] + ".out", out)
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	want := map[string]any{
		"f32": []float32{2, 4, 6, 8, 10, 13}, "f64": []float64{2, -4, 6}, "i32": []int32{-14, 18},
		"i64": []int64{1 << 41, -6}, "u32": []uint32{8, 0}, "u8": []uint8{0, 200},
		"bool": []bool{false, true, false}, "scalar": []float32{5},
	}
	for name, w := range want {
		got, err := ReadFile(filepath.Join(dir, name+".out.npy"))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Data, w) {
			t.Errorf("%s: got %v, want %v", name, got.Data, w)
		}
		if len(got.Shape) != len(in[name].Shape) {
			t.Errorf("%s: shape %v, want %v", name, got.Shape, in[name].Shape)
		}
	}
}
