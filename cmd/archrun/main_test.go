package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/archgen/archgen/internal/npy"
	"github.com/archgen/archgen/parity"
)

// level is a reference case's model dir at one level, with mlx-lm's dumps.
func level(t *testing.T, arch, cas, lv string) (string, *parity.Dumps) {
	t.Helper()
	c := parity.CaseInfo{Arch: arch, Case: cas}
	dir := parity.LevelDir(parity.ModelsDir(), c, lv)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatalf("%v: run `make parity-models` first", err)
	}
	d, err := parity.LoadDumps(parity.RefsDir(), c, lv)
	if err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func tokenList(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

func TestLogitsMatchMLXLM(t *testing.T) {
	for _, tc := range [][3]string{
		{"llama", "sliding", "float32"},
		{"gemma2", "capped", "bfloat16"},
		{"phi3", "longrope_partial", "q4_g32"},
	} {
		t.Run(strings.Join(tc[:], "/"), func(t *testing.T) {
			dir, want := level(t, tc[0], tc[1], tc[2])
			out := filepath.Join(t.TempDir(), "logits.npy")
			if err := run([]string{"logits", "-model", dir, "-tokens", tokenList(want.Prompt), "-out", out}, nil, nil); err != nil {
				t.Fatal(err)
			}
			got, err := npy.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Shape, []int{len(want.Prompt), want.Vocab}) {
				t.Fatalf("shape %v, want [%d %d]", got.Shape, len(want.Prompt), want.Vocab)
			}
			vals, ok := got.Data.([]float32)
			if !ok {
				t.Fatalf("data is %T, want float32", got.Data)
			}
			d, err := parity.Compare(vals, want.Prefill)
			if err != nil {
				t.Fatal(err)
			}
			if tol := parity.Tolerances[tc[2]]; d.Rel() > tol.Rel {
				t.Errorf("max abs error %.3g (%.3g of the scale), tolerance %.3g", d.MaxAbs, d.Rel(), tol.Rel)
			}
		})
	}
}

func TestGreedyMatchesMLXLM(t *testing.T) {
	for _, tc := range [][3]string{
		{"llama", "rope_dynamic", "float32"},
		{"smollm3", "nope_list", "q8_g32"},
		{"starcoder2", "untied_mha", "bfloat16"},
	} {
		t.Run(strings.Join(tc[:], "/"), func(t *testing.T) {
			dir, want := level(t, tc[0], tc[1], tc[2])
			var stdout bytes.Buffer
			n := strconv.Itoa(len(want.DecodeTokens))
			if err := run([]string{"greedy", "-model", dir, "-tokens", tokenList(want.Prompt), "-n", n}, &stdout, nil); err != nil {
				t.Fatal(err)
			}
			wantLine := strings.ReplaceAll(tokenList(want.DecodeTokens), ",", " ") + "\n"
			if stdout.String() != wantLine {
				t.Errorf("printed %q, mlx-lm's greedy tokens are %q", stdout.String(), wantLine)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	dir, _ := level(t, "llama", "base", "float32")
	alias := t.TempDir()
	if err := os.WriteFile(filepath.Join(alias, "config.json"), []byte(`{"model_type": "deepseek_v41_text"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	unknown := t.TempDir()
	if err := os.WriteFile(filepath.Join(unknown, "config.json"), []byte(`{"model_type": "no_such_arch"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	checkCLIErrors(t, []cliError{
		{nil, "", true, "no command"},
		{[]string{"sample", "-model", dir, "-tokens", "1"}, "", true, `unknown command "sample"`},
		{[]string{"greedy", "-tokens", "1"}, "", true, "-model is required: a model directory, a .gguf file or a Hugging Face repo id"},
		{[]string{"greedy", "-model", dir}, "", true, "-tokens is required"},
		{[]string{"greedy", "-model", dir, "-tokens", "1,x"}, "", true, `item 2 ("x")`},
		{[]string{"greedy", "-model", dir, "-tokens", "1", "-n", "0"}, "", true, "-n 0"},
		{[]string{"logits", "-model", dir, "-tokens", "1"}, "", true, "-out FILE.npy"},
		{[]string{"greedy", "-model", dir, "-tokens", "1", "extra"}, "", true, "unexpected arguments"},
		{[]string{"greedy", "-model", dir, "-tokens", "1", "-dtype", "int8"}, "", true, `-dtype "int8": want float32, bfloat16, float16 or checkpoint`},
		{[]string{"greedy", "-model", dir, "-tokens", "1,256"}, "", false, "token 256 (position 1) is outside the vocabulary of 256"},
		{[]string{"greedy", "-model", alias, "-tokens", "1"}, "", false, `"deepseek_v41_text" is an alias of "deepseek_v41"`},
		{[]string{"greedy", "-model", unknown, "-tokens", "1"}, "", false, `"no_such_arch" is not supported`},
		{[]string{"greedy", "-model", filepath.Join(unknown, "missing"), "-tokens", "1"}, "", false, "missing: no such file or directory: pass a model directory, a .gguf file or a Hugging Face repo id (ORG/NAME)"},
		{[]string{"greedy", "-model", unknown + "/..", "-tokens", "1"}, "", false, "has no config.json: a model directory holds config.json, the weights"},
	})
}

// cliError is a command line (args, then stdin on standard input) that
// must fail with an error containing want, a usage error (status 2) or
// not as usage says.
type cliError struct {
	args  []string
	stdin string
	usage bool
	want  string
}

func checkCLIErrors(t *testing.T, cases []cliError) {
	t.Helper()
	for _, tc := range cases {
		err := runIO(tc.args, strings.NewReader(tc.stdin), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil {
			t.Errorf("archrun %.100q: no error, want %q", tc.args, tc.want)
			continue
		}
		var u usageError
		if errors.As(err, &u) != tc.usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("archrun %.100q: %v (usage error %v), want %q (usage error %v)", tc.args, err, errors.As(err, &u), tc.want, tc.usage)
		}
	}
}
