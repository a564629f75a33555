package gen

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzName = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// FuzzResolve puts one fuzzed descriptor file among the real ones and
// resolves the set: no input may panic, an error must name a descriptor
// file, and a descriptor that resolves must generate its package.
func FuzzResolve(f *testing.F) {
	real := map[string][]byte{}
	paths, _ := filepath.Glob("../descriptors/*.yaml")
	paths2, _ := filepath.Glob("testdata/golden/*/descriptors/*.yaml")
	for _, p := range append(paths, paths2...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		if strings.HasPrefix(p, "../descriptors/") {
			real["descriptors/"+name+".yaml"] = data
		}
		f.Add(name, data)
	}
	if len(real) == 0 {
		f.Fatal("no descriptors")
	}
	f.Add("a", []byte(base))
	f.Add("b", []byte(child))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		if !fuzzName.MatchString(name) {
			return
		}
		files := map[string][]byte{}
		for k, v := range real {
			files[k] = v
		}
		files["descriptors/"+name+".yaml"] = data
		s, err := Resolve(files)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "descriptors/") {
				t.Fatalf("error naming no file: %v", err)
			}
			return
		}
		a := s.Arch(name)
		if a == nil {
			return // registry.yaml, say
		}
		for _, emit := range []func(*Arch) ([]byte, error){emitConfig, emitModel, emitForward, emitArchTest} {
			if _, err := emit(a); err != nil {
				t.Fatalf("%s resolves but does not generate: %v", name, err)
			}
		}
	})
}
