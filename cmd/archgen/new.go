package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/archgen/archgen/gen"
)

// newUsage is the usage line of the new subcommand.
const newUsage = "usage: archgen [-root dir] new MODEL_TYPE --from config.json [--extends BASE]"

// runNew drafts descriptors/MODEL_TYPE.yaml from a published config.json:
// it writes the draft and prints a parity case stub for
// parity/refgen/cases.py. args are what follows "new".
func runNew(root string, set *gen.Set, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("archgen new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the config.json to draft from (required)")
	extends := fs.String("extends", "", "the descriptor to extend (default: the one whose keys fit the config best)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, newUsage)
		fs.PrintDefaults()
	}
	// MODEL_TYPE may stand before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	if name == "" || *from == "" {
		fs.Usage()
		return 2
	}
	d, err := draftArch(set, name, *from, *extends)
	if err != nil {
		fmt.Fprintln(stderr, "archgen new:", err)
		return 2
	}
	path := filepath.Join(root, "descriptors", name+".yaml")
	if _, err := os.Stat(path); err == nil {
		fmt.Fprintf(stderr, "archgen new: descriptors/%s.yaml already exists\n", name)
		return 2
	}
	if err := os.WriteFile(path, d.yaml, 0o644); err != nil {
		fmt.Fprintln(stderr, "archgen new:", err)
		return 2
	}
	fmt.Fprintf(stderr, "wrote descriptors/%s.yaml: extends %s (%s); %d of the config's keys are TODOs\n",
		name, d.base.Name, d.reason, len(d.todo))
	fmt.Fprint(stdout, d.caseStub)
	return 0
}

// draft is what runNew writes and prints.
type draft struct {
	base     *gen.Arch
	reason   string
	read     []string // config keys the base reads
	ignored  []string // config keys the base ignores
	todo     []string // config keys no one maps yet
	missing  []string // keys the base requires that the config lacks
	yaml     []byte
	caseStub string
}

// wrapperNamed is the wrapper descriptor of model_type name (or alias),
// or nil.
func wrapperNamed(set *gen.Set, name string) *gen.Wrapper {
	for _, w := range set.Wrappers {
		if w.Name == name || slices.Contains(w.Aliases, name) {
			return w
		}
	}
	return nil
}

// configKeys reads a config.json's keys: the top level, with text_config's
// keys over it (a wrapper's text model reads text_config alone). It returns the merged keys, the original
// object (for the case stub) and whether a text_config was merged.
func configKeys(path string) (map[string]any, map[string]any, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil || top == nil {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return nil, nil, false, fmt.Errorf("%s: %v", path, err)
	}
	merged := map[string]any{}
	for k, v := range top {
		merged[k] = v
	}
	tc, nested := top["text_config"].(map[string]any)
	for k, v := range tc {
		if k != "model_type" {
			merged[k] = v
		}
	}
	return merged, top, nested, nil
}

// draftArch builds the draft of name from the config at from, on base (or
// on the best-fitting descriptor when base is "").
func draftArch(set *gen.Set, name, from, base string) (*draft, error) {
	if !regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`).MatchString(name) {
		return nil, fmt.Errorf("MODEL_TYPE %q: want lower-case letters, digits, _, . and -", name)
	}
	if a := set.Arch(name); a != nil {
		return nil, fmt.Errorf("model_type %q already runs on descriptors/%s.yaml", name, a.Name)
	}
	if w := wrapperNamed(set, name); w != nil {
		return nil, fmt.Errorf("model_type %q already runs on descriptors/%s.yaml (a wrapper)", name, w.Name)
	}
	cfg, top, nested, err := configKeys(from)
	if err != nil {
		return nil, err
	}
	if mt, ok := top["model_type"].(string); !ok || mt != name {
		return nil, fmt.Errorf("%s: model_type: %s, not %q", from, describe(top["model_type"]), name)
	}
	d := &draft{}
	if base != "" {
		if w := wrapperNamed(set, base); w != nil && w.Name == base {
			return nil, fmt.Errorf("--extends %s: a wrapper, with no network to extend (extend the architecture it runs, %s)", base, w.Runs)
		}
		if d.base = set.Arch(base); d.base == nil || d.base.Name != base {
			return nil, fmt.Errorf("--extends %s: no descriptor of that model_type", base)
		}
		d.reason = fitReason(d.base, cfg) + " (chosen with --extends)"
	} else {
		d.base, d.reason = bestBase(set, cfg)
	}
	readBy := map[string]bool{}
	for _, k := range d.base.Keys {
		readBy[k.Name] = true
		if k.Mode == "required" && cfg[k.Name] == nil && !fallbackPresent(k, cfg) {
			d.missing = append(d.missing, k.Name)
		}
	}
	for _, k := range sortedKeys(cfg) {
		switch {
		case k == "model_type":
		case readBy[k]:
			d.read = append(d.read, k)
		case slices.Contains(d.base.Ignored, k):
			d.ignored = append(d.ignored, k)
		default:
			d.todo = append(d.todo, k)
		}
	}
	d.yaml, err = d.descriptor(set, name, from, cfg, nested)
	if err != nil {
		return nil, err
	}
	d.caseStub = caseStub(name, d.base, top)
	return d, nil
}

// fallbackPresent: a required key whose value may stand elsewhere
// (rope_parameters.rope_theta) finds it there.
func fallbackPresent(k *gen.Key, cfg map[string]any) bool {
	for _, f := range k.Fallback {
		var v any = cfg
		for _, part := range strings.Split(f, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[part]
		}
		if v != nil {
			return true
		}
	}
	return false
}

// fit scores how well a descriptor's keys fit a config: a point for each
// config key it names (reads or ignores), a quarter off for each key it
// reads that the config does not have (machinery the config does not ask
// for), and three off for each key it requires that the config lacks.
func fit(a *gen.Arch, cfg map[string]any) (score float64, read, ignored int, missing []string) {
	unused := 0
	for _, k := range a.Keys {
		switch {
		case cfg[k.Name] != nil || fallbackPresent(k, cfg):
			read++
		case k.Mode == "required":
			missing = append(missing, k.Name)
		default:
			unused++
		}
	}
	for _, k := range a.Ignored {
		if _, ok := cfg[k]; ok {
			ignored++
		}
	}
	return float64(read+ignored) - 0.25*float64(unused) - 3*float64(len(missing)), read, ignored, missing
}

func fitReason(a *gen.Arch, cfg map[string]any) string {
	_, read, ignored, missing := fit(a, cfg)
	n := len(cfg)
	if _, ok := cfg["model_type"]; ok {
		n--
	}
	s := fmt.Sprintf("it reads %d of the config's %d keys and ignores %d", read, n, ignored)
	if len(missing) == 0 {
		return s + "; it requires no key the config lacks"
	}
	return s + "; it requires " + strings.Join(missing, ", ") + ", which the config lacks"
}

// bestBase is the descriptor that fits the config best (fit, less half a
// point for each base it extends), and why; ties go to a descriptor that
// extends nothing, then to the first by name.
func bestBase(set *gen.Set, cfg map[string]any) (*gen.Arch, string) {
	type scored struct {
		a *gen.Arch
		s float64
	}
	// depth counts a descriptor's bases: a simpler base wins a near-tie.
	depth := func(a *gen.Arch) int {
		n := 0
		for b := a; b != nil && b.Extends != "" && n < len(set.Archs); n++ {
			b = set.Arch(b.Extends)
		}
		return n
	}
	var all []scored
	for _, a := range set.Archs {
		s, _, _, _ := fit(a, cfg)
		all = append(all, scored{a, s - 0.5*float64(depth(a))})
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].s != all[j].s {
			return all[i].s > all[j].s
		}
		return all[i].a.Extends == "" && all[j].a.Extends != ""
	})
	reason := fitReason(all[0].a, cfg)
	if len(all) > 1 {
		reason += fmt.Sprintf(" (score %g; next %s, %g)", all[0].s, all[1].a.Name, all[1].s)
	}
	return all[0].a, reason
}

// descriptor is the draft's YAML.
func (d *draft) descriptor(set *gen.Set, name, from string, cfg map[string]any, nested bool) ([]byte, error) {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# Drafted by `archgen new %s --from %s`.", name, filepath.Base(from))
	p("# Read mlx-lm's models/%s.py for every fact (ModelArgs: keys and defaults;", name)
	p("# the modules: structure; sanitize: weights.drop), settle each TODO, then")
	p("# delete these comments. descriptors/README.md documents every key.")
	p("#")
	p("# Base: %s, because %s.", d.base.Name, d.reason)
	wrap(&b, "# Read by "+d.base.Name+": ", d.read)
	wrap(&b, "# Ignored by "+d.base.Name+": ", d.ignored)
	wrap(&b, "# TODO (below, under config.ignore): ", d.todo)
	for _, k := range d.missing {
		p("# TODO: %s requires %s, which the config lacks: give it mlx-lm's default", d.base.Name, k)
		p("#   (config.keys.%s: {default: ...}) or remove it (%s: null).", k, k)
	}
	if nested {
		p("# TODO: the config nests text_config: a wrapper. Its model_type gets a wrapper")
		p("#   descriptor (include: [vlm_wrapper]; descriptors/README.md, Wrappers) that")
		p("#   runs the text model's architecture; check in mlx-lm which keys it reads")
		p("#   from where, what it fixes (wrapper.defaults, wrapper.set), and the tensors")
		p("#   sanitize drops.")
	}
	p("model_type: %s", name)
	p("tier: smoke")
	p("doc: |")
	p("  TODO: what %s is, and how it differs from %s.", name, d.base.Name)
	p("extends: %s", d.base.Name)
	if len(d.todo) > 0 {
		p("")
		p("config:")
		p("  # TODO: each key below: read it (move it to keys with its type and")
		p("  # mlx-lm's default) or keep ignoring it.")
		p("  ignore:")
		for _, k := range d.todo {
			p("    - %s  # %s", yamlScalar(k), hint(set, k, cfg[k]))
		}
	}
	p("")
	p("# TODO: %s's test_config; change it where the keys above change the network.", d.base.Name)
	tc := map[string]any{}
	for k, v := range d.base.TestConfig {
		if k != "model_type" {
			tc[k] = v
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]any{"test_config": tc}); err != nil {
		return nil, err
	}
	b.Write(out.Bytes())
	return []byte(b.String()), nil
}

// wrap writes a comment listing names, wrapped at 80 columns.
func wrap(b *strings.Builder, head string, names []string) {
	if len(names) == 0 {
		return
	}
	line := head
	for i, n := range names {
		if i < len(names)-1 {
			n += ","
		}
		if len(line)+1+len(n) > 80 && line != head {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = "#   "
		}
		if !strings.HasSuffix(line, " ") {
			line += " "
		}
		line += n
	}
	b.WriteString(line + "\n")
}

// yamlScalar spells a key so that YAML reads it back as the same string.
func yamlScalar(s string) string {
	out, err := yaml.Marshal(s)
	if err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSpace(string(out))
}

// hint says what a TODO key holds, and which descriptors read a key of that
// name and how.
func hint(set *gen.Set, key string, v any) string {
	s := describe(v) + " in the config"
	if t := typeOf(v); t != "" {
		s += "; type " + t
	}
	var readers []string
	for _, a := range set.Archs {
		for _, k := range a.Keys {
			if k.Name == key {
				r := fmt.Sprintf("%s (%s, %s", a.Name, k.Type, k.Mode)
				if k.Mode == "default" {
					r += fmt.Sprintf(" %v", k.Default)
				}
				readers = append(readers, r+")")
			}
		}
	}
	if len(readers) > 0 {
		s += "; read by " + strings.Join(readers, ", ")
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// describe spells a JSON value short.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "absent or null"
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return fmt.Sprintf("an object of %d keys", len(x))
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	}
	return fmt.Sprint(v)
}

// typeOf is the descriptor type a JSON value reads as, or "" when none.
func typeOf(v any) string {
	switch x := v.(type) {
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "int"
		}
		return "float"
	case []any:
		ints, nums, strs, bools := true, true, true, true
		for _, e := range x {
			t := typeOf(e)
			ints = ints && t == "int"
			nums = nums && (t == "int" || t == "float")
			strs = strs && t == "string"
			bools = bools && t == "bool"
		}
		switch {
		case len(x) == 0:
		case ints:
			return "ints"
		case nums:
			return "floats"
		case strs:
			return "strings"
		case bools:
			return "bools"
		}
	}
	return ""
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
