package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/archgen/archgen/gen"
)

// caseStub is a parity case stub for parity/refgen/cases.py: the config at
// the shared small sizes (hidden 64, 2 layers, 4 heads, vocab 256), every
// other key as published, float32 weights and no quantization block.
func caseStub(name string, base *gen.Arch, top map[string]any) string {
	cfg := clone(top).(map[string]any)
	body := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		body = tc
	}
	layersKey := "num_hidden_layers"
	if base.Layers != nil {
		layersKey = strings.TrimSpace(base.Layers.Text)
	}
	shrink(body, layersKey)
	delete(cfg, "quantization")
	delete(cfg, "quantization_config")
	for _, k := range []string{"torch_dtype", "dtype"} {
		if _, ok := cfg[k]; ok {
			cfg[k] = "float32"
		}
	}
	fn := "_" + strings.NewReplacer("-", "_", ".", "_").Replace(name)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# Paste into parity/refgen/cases.py and add `+ %s_cases()` to CASES. Then", fn)
	p("# set the arch's distinctive keys to non-default values across two or more")
	p("# cases (tied and untied head, biases, rope scaling, GQA and plain multi-head),")
	p("# run `make refs`, and `go test ./parity/ -run 'TestParity/%s/'`.", name)
	p("def %s_cases() -> List[Case]:", fn)
	p("    def cfg(**over):")
	p("        c = %s", python(cfg, 8))
	p("        c.update(over)")
	p("        return c")
	p("")
	p("    return [")
	p("        Case(%q, \"base\", \"TODO: what this case exercises\", cfg()),", name)
	p("        # TODO: Case(%q, \"...\", \"...\", cfg(<distinctive keys at other values>)),", name)
	p("    ]")
	return b.String()
}

// shrink sets a config's sizes to the parity cases' shared ones, keeping
// the published ratios that matter: grouped-query attention stays grouped,
// a head_dim unlike hidden/heads stays unlike it, and per-layer lists keep
// their first entries.
func shrink(c map[string]any, layersKey string) {
	num := func(k string) (int64, bool) {
		n, ok := c[k].(json.Number)
		if !ok {
			return 0, false
		}
		v, err := n.Int64()
		return v, err == nil
	}
	hidden, _ := num("hidden_size")
	heads, hasHeads := num("num_attention_heads")
	kv, hasKV := num("num_key_value_heads")
	layers, hasLayers := num(layersKey)
	headDim, hasHeadDim := num("head_dim")
	set := func(k string, v int) {
		if _, ok := c[k]; ok {
			c[k] = json.Number(strconv.Itoa(v))
		}
	}
	set("hidden_size", 64)
	set("intermediate_size", 128)
	set("vocab_size", 256)
	set(layersKey, 2)
	set("num_attention_heads", 4)
	if hasKV && hasHeads {
		switch {
		case kv == 1:
			set("num_key_value_heads", 1)
		case kv < heads:
			set("num_key_value_heads", 2)
		default:
			set("num_key_value_heads", 4)
		}
	}
	if hasHeadDim {
		if hasHeads && headDim*heads == hidden {
			set("head_dim", 16)
		} else {
			set("head_dim", 32)
		}
	}
	if hasLayers {
		for k, v := range c {
			if l, ok := v.([]any); ok && int64(len(l)) == layers && layers > 2 {
				c[k] = l[:2]
			}
		}
	}
}

func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = clone(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = clone(e)
		}
		return l
	}
	return v
}

// python spells a JSON value as a Python literal, objects one key a line
// (sorted), indented by indent spaces.
func python(v any, indent int) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		q, _ := json.Marshal(x)
		return string(q)
	case json.Number:
		return x.String()
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = python(e, indent+4)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		if len(x) == 0 {
			return "{}"
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pad := strings.Repeat(" ", indent+4)
		var b strings.Builder
		b.WriteString("{\n")
		for _, k := range keys {
			q, _ := json.Marshal(k)
			fmt.Fprintf(&b, "%s%s: %s,\n", pad, q, python(x[k], indent+4))
		}
		b.WriteString(strings.Repeat(" ", indent) + "}")
		return b.String()
	}
	return fmt.Sprint(v)
}
