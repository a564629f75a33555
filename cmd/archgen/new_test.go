package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/archgen/archgen/gen"
)

// rootWithout is a module root holding a copy of the repository's
// descriptors less the named ones, and all its fragments.
func rootWithout(t *testing.T, drop ...string) string {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, "descriptors")
	os.MkdirAll(dst, 0o755)
	paths, _ := filepath.Glob("../../descriptors/*.yaml")
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".yaml")
		skip := false
		for _, d := range drop {
			skip = skip || d == name
		}
		if skip {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, filepath.Base(p)), data, 0o644)
	}
	frags, _ := filepath.Glob("../../descriptors/fragments/*.yaml")
	os.MkdirAll(filepath.Join(dst, "fragments"), 0o755)
	for _, p := range frags {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, "fragments", filepath.Base(p)), data, 0o644)
	}
	return root
}

// listed gathers the key names of the draft's "# Read by", "# Ignored by"
// and "# TODO (below" comments, with their continuation lines.
func listed(t *testing.T, draft string) map[string]string {
	t.Helper()
	out := map[string]string{}
	head := regexp.MustCompile(`^# (Read by \w+|Ignored by \w+|TODO \(below, under config.ignore\)): (.*)$`)
	section := ""
	for _, line := range strings.Split(draft, "\n") {
		var names string
		if m := head.FindStringSubmatch(line); m != nil {
			section, names = m[1], m[2]
		} else if section != "" && strings.HasPrefix(line, "#   ") {
			names = line[4:]
		} else {
			section = ""
			continue
		}
		for _, n := range strings.Split(names, ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			if prev, ok := out[n]; ok {
				t.Errorf("%s is listed under %q and %q", n, prev, section)
			}
			out[n] = section
		}
	}
	return out
}

// TestNewDraftsAnArch drafts mimo from its published config on descriptors
// without mimo: the draft names every key of the config once (read by the
// base, ignored by it, or a TODO), says which base and why, and resolves
// and generates as it is; the case stub is Python that builds the config
// at the cases' sizes.
func TestNewDraftsAnArch(t *testing.T) {
	root := rootWithout(t, "mimo")
	cfgPath, _ := filepath.Abs("../../gen/testdata/configs/mimo/mimo-7b.json")
	code, stub, errs := archgen("-root", root, "new", "mimo", "--from", cfgPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !regexp.MustCompile(`^wrote descriptors/mimo.yaml: extends \w+ \(it reads \d+ of the config's 26 keys and ignores \d+; .*\); \d+ of the config's keys are TODOs\n$`).MatchString(errs) {
		t.Errorf("summary: %q", errs)
	}
	data, err := os.ReadFile(filepath.Join(root, "descriptors", "mimo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	draft := string(data)

	var cfg map[string]any
	raw, _ := os.ReadFile(cfgPath)
	json.Unmarshal(raw, &cfg)
	got := listed(t, draft)
	for k := range cfg {
		if _, ok := got[k]; !ok && k != "model_type" {
			t.Errorf("config key %s is not in the draft's lists", k)
		}
		delete(got, k)
	}
	for k := range got {
		t.Errorf("the draft lists %s, which the config does not have", k)
	}
	for _, want := range []string{
		"model_type: mimo\n", "tier: smoke\n", "\nextends: ", "\ntest_config:\n",
		"    - num_nextn_predict_layers  # 2 in the config; type int\n",
	} {
		if !strings.Contains(draft, want) {
			t.Errorf("the draft has no %q:\n%s", want, draft)
		}
	}

	set, err := gen.Load(filepath.Join(root, "descriptors"), "descriptors")
	if err != nil {
		t.Fatalf("the draft does not resolve: %v\n%s", err, draft)
	}
	if a := set.Arch("mimo"); a == nil || a.Tier != "smoke" {
		t.Fatalf("mimo after drafting: %+v", a)
	}
	if _, err := gen.Generate(set); err != nil {
		t.Fatalf("the draft does not generate: %v", err)
	}

	// The stub runs as Python and builds the config at the cases' sizes.
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, to run the case stub: %v", err)
	}
	prog := "from dataclasses import dataclass\nfrom typing import Any, Dict, List\n\n" +
		"@dataclass\nclass Case:\n    arch: str\n    name: str\n    doc: str\n    config: Dict[str, Any]\n\n" +
		stub + "\nimport json\nprint(json.dumps([c.config for c in _mimo_cases()], sort_keys=True))\n"
	out, err := exec.Command(py, "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("the case stub does not run: %v\n%s\n%s", err, out, stub)
	}
	var cases []map[string]any
	if err := json.Unmarshal(out, &cases); err != nil || len(cases) != 1 {
		t.Fatalf("cases: %v %s", err, out)
	}
	c := cases[0]
	for k, want := range map[string]any{
		"model_type": "mimo", "hidden_size": 64.0, "intermediate_size": 128.0, "num_hidden_layers": 2.0,
		"num_attention_heads": 4.0, "num_key_value_heads": 2.0, "head_dim": 16.0, "vocab_size": 256.0,
		"torch_dtype": "float32", "rope_theta": 640000.0, "num_nextn_predict_layers": 2.0, "attention_bias": true,
	} {
		if c[k] != want {
			t.Errorf("stub %s = %v, want %v", k, c[k], want)
		}
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(c) != len(cfg) {
		t.Errorf("the stub has keys %v; the config %d keys", keys, len(cfg))
	}
}

// TestNewExtends: --extends names the base, and the draft says so.
func TestNewExtends(t *testing.T) {
	root := rootWithout(t, "mimo")
	code, _, errs := archgen("-root", root, "new", "--from", "../../gen/testdata/configs/mimo/mimo-7b.json", "--extends", "qwen2", "mimo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	data, _ := os.ReadFile(filepath.Join(root, "descriptors", "mimo.yaml"))
	for _, want := range []string{"\nextends: qwen2\n", "# Base: qwen2, because it reads ", "(chosen with --extends)"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("no %q in\n%s", want, data)
		}
	}
}

// TestNewRefuses: each refusal exits 2 with its message and writes nothing.
func TestNewRefuses(t *testing.T) {
	root := rootWithout(t, "mimo")
	mimo := "../../gen/testdata/configs/mimo/mimo-7b.json"
	notJSON := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(notJSON, []byte("{\"model_type\": "), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"existing model_type", []string{"new", "llama", "--from", mimo}, `archgen new: model_type "llama" already runs on descriptors/llama.yaml`},
		{"alias", []string{"new", "mistral", "--from", mimo}, `archgen new: model_type "mistral" already runs on descriptors/llama.yaml`},
		{"wrapper", []string{"new", "pixtral", "--from", mimo}, `archgen new: model_type "pixtral" already runs on descriptors/pixtral.yaml (a wrapper)`},
		{"wrapper as the base", []string{"new", "mimo", "--from", mimo, "--extends", "pixtral"}, `archgen new: --extends pixtral: a wrapper, with no network to extend (extend the architecture it runs, llama)`},
		{"config of another model_type", []string{"new", "foo", "--from", mimo}, `archgen new: ` + mimo + `: model_type: "mimo", not "foo"`},
		{"unknown base", []string{"new", "mimo", "--from", mimo, "--extends", "nosuch"}, `archgen new: --extends nosuch: no descriptor of that model_type`},
		{"bad name", []string{"new", "Mi Mo", "--from", mimo}, `archgen new: MODEL_TYPE "Mi Mo": want lower-case letters, digits, _, . and -`},
		{"missing file", []string{"new", "mimo", "--from", "nosuch.json"}, `archgen new: open nosuch.json: no such file or directory`},
		{"not JSON", []string{"new", "mimo", "--from", notJSON}, `archgen new: ` + notJSON + `: unexpected EOF`},
		{"no --from", []string{"new", "mimo"}, newUsage},
		{"no MODEL_TYPE", []string{"new", "--from", mimo}, newUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := archgen(append([]string{"-root", root}, tc.args...)...)
			first, _, _ := strings.Cut(errs, "\n")
			if code != 2 || out != "" || first != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errs, tc.want)
			}
			if _, err := os.Stat(filepath.Join(root, "descriptors", "mimo.yaml")); err == nil {
				t.Fatal("a refused draft was written")
			}
		})
	}
}
