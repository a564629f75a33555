package gen

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var fuzzName = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// fragPrefix marks a fuzzed name as a fragment's.
const fragPrefix = "frag_"

// FuzzResolve puts one fuzzed descriptor file (or, named frag_<name>, a
// fragment) among the real ones and resolves the set: no input may panic,
// an error must name a descriptor file, and a descriptor that resolves
// must generate its package (every package, for a fragment).
func FuzzResolve(f *testing.F) {
	real := map[string][]byte{}
	var paths []string
	for _, g := range []string{"../descriptors/*.yaml", "../descriptors/fragments/*.yaml",
		"testdata/golden/*/descriptors/*.yaml", "testdata/golden/*/descriptors/fragments/*.yaml"} {
		ps, _ := filepath.Glob(g)
		paths = append(paths, ps...)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		frag := filepath.Base(filepath.Dir(p)) == FragmentsDir
		if strings.HasPrefix(p, "../descriptors/") {
			if frag {
				real["descriptors/fragments/"+name+".yaml"] = data
			} else {
				real["descriptors/"+name+".yaml"] = data
			}
		}
		if frag {
			name = fragPrefix + name
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
		frag, isFrag := strings.CutPrefix(name, fragPrefix)
		if isFrag {
			files["descriptors/fragments/"+frag+".yaml"] = data
		} else {
			files["descriptors/"+name+".yaml"] = data
		}
		s, err := Resolve(files)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "descriptors/") {
				t.Fatalf("error naming no file: %v", err)
			}
			return
		}
		if isFrag || s.wrapper(name) != nil {
			if _, err := Generate(s); err != nil {
				t.Fatalf("fragment %s resolves but does not generate: %v", frag, err)
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
