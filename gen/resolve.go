package gen

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
)

// RegistryFile is the descriptor file that lists model_types refused by
// name rather than described.
const RegistryFile = "registry.yaml"

// Set is every descriptor of a directory, loaded, flattened and resolved.
type Set struct {
	Archs    []*Arch           // sorted by name
	Wrappers []*Wrapper        // sorted by name
	Remapped map[string]string // alias -> arch without a descriptor
	Drafters []string
	// Flat are the descriptors with extends flattened and defaults
	// applied, by model_type, for explain.
	Flat map[string]*Descriptor
}

// Arch finds an architecture by model_type or alias.
func (s *Set) Arch(name string) *Arch {
	for _, a := range s.Archs {
		if a.Name == name {
			return a
		}
		for _, al := range a.Aliases {
			if al == name {
				return a
			}
		}
	}
	return nil
}

// FragmentsDir is the directory, beside the descriptors, of the fragments
// they include.
const FragmentsDir = "fragments"

// Load reads every descriptors/*.yaml of dir, and the fragments of
// dir/fragments (named by rel in messages, as "descriptors"), and resolves
// them.
func Load(dir, rel string) (*Set, error) {
	files := map[string][]byte{}
	for _, sub := range []string{"", FragmentsDir} {
		paths, err := filepath.Glob(filepath.Join(dir, sub, "*.yaml"))
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			files[filepath.ToSlash(filepath.Join(rel, sub, filepath.Base(p)))] = data
		}
	}
	return Resolve(files)
}

// isFragment reports whether a file name is a fragment's.
func isFragment(name string) bool {
	return filepath.Base(filepath.Dir(name)) == FragmentsDir
}

// parseFragment reads one fragment and checks that it is one.
func parseFragment(n string, data []byte) (*Descriptor, error) {
	d := &Descriptor{file: n}
	if err := parseFile(n, data, d); err != nil {
		return nil, err
	}
	want := strings.TrimSuffix(filepath.Base(n), ".yaml")
	if !d.Fragment.IsSet() {
		return nil, errAt(Pos{File: n, Line: 1}, "fragment", "missing (required): the fragment's name, %q", want)
	}
	if d.Fragment.V != want {
		return nil, errAt(d.Fragment.Pos, "fragment", "%q does not match the file name (want %q)", d.Fragment.V, want)
	}
	if !d.Doc.IsSet() || strings.TrimSpace(d.Doc.V) == "" {
		return nil, errAt(Pos{File: n, Line: 1}, "doc", "missing (required): what the fragment brings")
	}
	for _, x := range []struct {
		set bool
		pos Pos
		key string
	}{
		{d.ModelType.Set, d.ModelType.Pos, "model_type"}, {d.Tier.Set, d.Tier.Pos, "tier"},
		{d.Aliases.Set, d.Aliases.Pos, "aliases"}, {d.Extends.Set, d.Extends.Pos, "extends"},
		{d.Include.Set, d.Include.Pos, "include"},
	} {
		if x.set {
			return nil, errAt(x.pos, x.key, "a fragment has none (only a descriptor has %s)", strings.Join(notInFragments, ", "))
		}
	}
	return d, nil
}

// Resolve resolves descriptor files given by name (descriptors/llama.yaml)
// and content.
func Resolve(files map[string][]byte) (*Set, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	set := &Set{Remapped: map[string]string{}, Flat: map[string]*Descriptor{}}
	byType := map[string]*Descriptor{}
	claimed := map[string]Pos{} // model_types and aliases, where first named
	claim := func(name string, pos Pos, path string) error {
		if prev, dup := claimed[name]; dup {
			return errAt(pos, path, "%q is already named at %s", name, prev)
		}
		claimed[name] = pos
		return nil
	}
	var descs []*Descriptor
	var reg *Registry
	frags := map[string]*Descriptor{}
	for _, n := range names {
		if isFragment(n) {
			fr, err := parseFragment(n, files[n])
			if err != nil {
				return nil, err
			}
			frags[fr.Fragment.V] = fr
			continue
		}
		if filepath.Base(n) == RegistryFile {
			reg = &Registry{}
			if err := parseFile(n, files[n], reg); err != nil {
				return nil, err
			}
			continue
		}
		d := &Descriptor{file: n}
		if err := parseFile(n, files[n], d); err != nil {
			return nil, err
		}
		if d.Fragment.Set {
			return nil, errAt(d.Fragment.Pos, "fragment", "only files in descriptors/%s/ are fragments; a descriptor includes them (include: [...])", FragmentsDir)
		}
		if !d.ModelType.IsSet() {
			return nil, errAt(Pos{File: n, Line: 1}, "model_type", "missing (required)")
		}
		mt := d.ModelType.V
		if want := strings.TrimSuffix(filepath.Base(n), ".yaml"); mt != want {
			return nil, errAt(d.ModelType.Pos, "model_type", "%q does not match the file name (want %q)", mt, want)
		}
		if err := claim(mt, d.ModelType.Pos, "model_type"); err != nil {
			return nil, err
		}
		for i, al := range d.Aliases.V {
			if err := claim(al, d.Aliases.Pos, fmt.Sprintf("aliases[%d]", i)); err != nil {
				return nil, err
			}
		}
		byType[mt] = d
		descs = append(descs, d)
	}
	if reg != nil {
		for _, e := range reg.Remapped.Entries {
			if e.Null || !e.Val.IsSet() {
				return nil, errAt(e.Pos, "remapped."+e.Key, "want the model_type it is an alias of")
			}
			if _, ok := byType[e.Val.V]; ok {
				return nil, errAt(e.Pos, "remapped."+e.Key, "%q has a descriptor: list %q in its aliases instead", e.Val.V, e.Key)
			}
			if err := claim(e.Key, e.Pos, "remapped."+e.Key); err != nil {
				return nil, err
			}
			set.Remapped[e.Key] = e.Val.V
		}
		for i, d := range reg.Drafters.V {
			if err := claim(d, reg.Drafters.Pos, fmt.Sprintf("drafters[%d]", i)); err != nil {
				return nil, err
			}
			set.Drafters = append(set.Drafters, d)
		}
	}
	// Flatten extends, bases first, and merge in the fragments. chain is
	// the descriptors being flattened, d last. lineage is what a child
	// inherits from a descriptor: its own values and its bases', without
	// its fragments.
	lineage := map[string]*Descriptor{}
	var flatten func(d *Descriptor, chain []string) error
	flatten = func(d *Descriptor, chain []string) error {
		mt := d.ModelType.V
		if _, done := lineage[mt]; done {
			return nil
		}
		own := deepCopy(reflect.ValueOf(d).Elem()).Addr().Interface().(*Descriptor)
		var baseLine *Descriptor
		if d.Extends.IsSet() {
			base, ok := byType[d.Extends.V]
			if !ok {
				return errAt(d.Extends.Pos, "extends", "no descriptor for %q", d.Extends.V)
			}
			for i, c := range chain {
				if c == base.ModelType.V {
					cycle := append(append([]string{}, chain[i:]...), c)
					return errAt(d.Extends.Pos, "extends", "cycle: %s", strings.Join(cycle, " -> "))
				}
			}
			if err := flatten(base, append(chain, base.ModelType.V)); err != nil {
				return err
			}
			baseLine = lineage[base.ModelType.V]
			inherit(own, baseLine)
		}
		own.GGUF = GGUFDesc{}              // a GGUF name belongs to one model_type
		own.Variants = List[VariantRule]{} // a variant runs its base's configs, not its own
		lineage[mt] = own
		return compose(d, baseLine, frags)
	}
	for _, d := range descs {
		if err := flatten(d, []string{d.ModelType.V}); err != nil {
			return nil, err
		}
	}
	for _, d := range descs {
		if isWrapper(d) {
			w, err := buildWrapper(d, byType)
			if err != nil {
				return nil, err
			}
			set.Wrappers = append(set.Wrappers, w)
			set.Flat[w.Name] = d
			continue
		}
		applyDefaults(d)
		a, err := build(d)
		if err != nil {
			return nil, err
		}
		set.Archs = append(set.Archs, a)
		set.Flat[a.Name] = d
	}
	sort.Slice(set.Archs, func(i, j int) bool { return set.Archs[i].Name < set.Archs[j].Name })
	if err := checkVariants(set); err != nil {
		return nil, err
	}
	sort.Slice(set.Wrappers, func(i, j int) bool { return set.Wrappers[i].Name < set.Wrappers[j].Name })
	// a GGUF architecture name (with what a file must hold, gguf.requires)
	// belongs to one descriptor
	ggufNames := map[[2]string]string{}
	for _, a := range set.Archs {
		if a.GGUF == nil {
			continue
		}
		for _, name := range append([]string{a.GGUF.Arch}, a.GGUF.Aliases...) {
			key := [2]string{name, a.GGUF.Requires}
			if prev, dup := ggufNames[key]; dup {
				d := set.Flat[a.Name]
				what := ""
				if a.GGUF.Requires != "" {
					what = " for files with " + a.GGUF.Requires
				}
				return nil, errAt(d.GGUF.Arch.Pos, "gguf.arch", "%q is %s's GGUF architecture already%s", name, prev, what)
			}
			ggufNames[key] = a.Name
		}
	}
	return set, nil
}

// ---- defaults ----

// setDefault gives an unset leaf its default (text "" for expressions
// means none). A leaf set to null takes a non-empty default too.
func setDefault[T any](f *F[T], v T, file string) {
	if !f.Set {
		*f = F[T]{V: v, Set: true, Pos: Pos{File: file}, Origin: FromDefault}
		return
	}
	if f.Null {
		f.V, f.Null = v, false
	}
}

func exprDefault(f *F[Expr], text, file string) {
	if text == "" {
		return
	}
	setDefault(f, Expr{Text: text, Pos: Pos{File: file}}, file)
}

// applyDefaults fills what a flattened descriptor leaves unset with the
// language's defaults (descriptors/README.md lists them): the checkpoint
// names' (names.go), then each component's own (experts' names follow the
// MLP's).
func applyDefaults(d *Descriptor) {
	f := d.file
	setDefault(&d.Tier, Tier("smoke"), f)
	s := &d.Structure
	exprDefault(&s.Layers, "num_hidden_layers", f)
	exprDefault(&s.Hidden, "hidden_size", f)
	exprDefault(&s.Vocab, "vocab_size", f)
	for _, r := range checkpointRoles() {
		if r.def != "" {
			setDefault(r.leaf(&d.Weights.Names), r.def, f)
		}
	}
	for _, defaults := range []func(*Descriptor){blockDefaults, normDefaults, attentionDefaults, ropeDefaults, mlpDefaults, headDefaults, moeDefaults} {
		defaults(d)
	}
}
