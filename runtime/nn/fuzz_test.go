package nn_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/archgen/archgen/generated/registry"
)

// FuzzParseConfig runs every generated architecture's ParseConfig on the
// same input: none may panic, and a config one accepts must also list its
// tensors without panicking (Tensors builds the model without weights).
// The seeds are the published configs of gen/testdata/configs.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("../../gen/testdata/configs/*/*.json")
	if len(files) == 0 {
		f.Fatal("no configs in gen/testdata/configs")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(tinyLlama))
	archs := registry.Archs()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, a := range archs {
			if a.Wrapper != nil {
				continue
			}
			if _, err := a.Config(data); err != nil {
				continue
			}
			if _, err := a.Tensors(data); err != nil {
				continue
			}
		}
	})
}
