package gen

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"
)

// Wrappers: a descriptor with a wrapper section describes checkpoints that
// hold a text model inside a larger one. It has no network of its own: the
// registry lists it, and loading unwraps the config's section and the
// tensors' prefixes and runs the text model on the architecture it names
// (runs, or dispatch on the section's model_type).

// Wrapper is a wrapper descriptor, resolved.
type Wrapper struct {
	Name, File, Doc, Tier string
	Aliases               []string
	Section               string
	SectionOptional       bool
	TopWins               []string
	Defaults              []Entry[Raw]
	TopDefaults           []Entry[Raw]
	Set                   []Entry[Raw]
	Runs                  string
	Dispatch              []Entry[F[string]]
	Prefixes              []PrefixDesc
	Drop                  []string
	Refuse                []string
}

// wrapperKeys are the top-level keys a wrapper may set.
var wrapperKeys = map[string]bool{"model_type": true, "doc": true, "tier": true, "aliases": true, "include": true, "wrapper": true}

// isWrapper reports whether a flattened descriptor is a wrapper's.
func isWrapper(d *Descriptor) bool {
	w := d.Wrapper
	return w.Section.Set || w.Optional.Set || w.Runs.Set || w.TopWins.Set || w.Defaults.Set || w.TopDefaults.Set || w.Set.Set || w.Dispatch.Set || w.Prefixes.Set || w.Drop.Set || w.Refuse.Set
}

// buildWrapper resolves a wrapper descriptor; archs are the descriptors by
// model_type, for runs and dispatch.
func buildWrapper(d *Descriptor, archs map[string]*Descriptor) (*Wrapper, error) {
	if d.Extends.IsSet() {
		return nil, errAt(d.Extends.Pos, "extends", "a wrapper extends nothing: its text model's architecture is wrapper.runs")
	}
	var extra error
	walk(reflect.ValueOf(d).Elem(), "", d.file, func(path, _ string, pos Pos, _ Origin) {
		top, _, _ := strings.Cut(path, ".")
		if !wrapperKeys[top] && extra == nil {
			extra = errAt(pos, path, "a wrapper has no %s: the architecture it runs (wrapper.runs) has", top)
		}
	})
	if extra != nil {
		return nil, extra
	}
	w := d.Wrapper
	pos := w.Pos
	if pos.File == "" {
		pos.File = d.file
	}
	doc := strings.TrimSpace(d.Doc.V)
	if doc == "" {
		return nil, errAt(Pos{File: d.file, Line: 1}, "doc", "missing (required): a paragraph on the architecture")
	}
	if !w.Section.IsSet() || w.Section.V == "" {
		return nil, errAt(pos, "wrapper.section", "missing (required): the config key holding the text model's config")
	}
	target := func(name string, at Pos, path string) error {
		t, ok := archs[name]
		if !ok {
			return errAt(at, path, "no descriptor for %q", name)
		}
		if isWrapper(t) {
			return errAt(at, path, "%q is a wrapper itself", name)
		}
		return nil
	}
	if !w.Runs.IsSet() {
		return nil, errAt(pos, "wrapper.runs", "missing (required): the model_type whose architecture runs the text model")
	}
	if err := target(w.Runs.V, w.Runs.Pos, "wrapper.runs"); err != nil {
		return nil, err
	}
	for _, e := range w.Dispatch.Entries {
		if e.Null || !e.Val.IsSet() {
			return nil, errAt(e.Pos, "wrapper.dispatch."+e.Key, "want the model_type whose architecture runs it")
		}
		if err := target(e.Val.V, e.Pos, "wrapper.dispatch."+e.Key); err != nil {
			return nil, err
		}
	}
	if err := checkRefuse(w, archs); err != nil {
		return nil, err
	}
	for i, p := range w.Prefixes.Items {
		if !p.From.IsSet() || p.From.V == "" || !p.To.IsSet() {
			return nil, errAt(p.Pos, fmt.Sprintf("wrapper.prefixes[%d]", i), "needs from (not empty) and to")
		}
	}
	for _, e := range w.Defaults.Entries {
		if e.Null {
			return nil, errAt(e.Pos, "wrapper.defaults."+e.Key, "want a value")
		}
	}
	if err := checkTopDefaults(&w); err != nil {
		return nil, err
	}
	for _, e := range w.Set.Entries {
		if e.Null {
			return nil, errAt(e.Pos, "wrapper.set."+e.Key, "want a value")
		}
	}
	tier := string(d.Tier.V)
	if tier == "" {
		tier = "smoke"
	}
	return &Wrapper{
		Name: d.ModelType.V, File: d.file, Doc: doc, Tier: tier, Aliases: d.Aliases.V,
		Section: w.Section.V, SectionOptional: w.Optional.V, TopWins: w.TopWins.V, Defaults: w.Defaults.Entries, TopDefaults: w.TopDefaults.Entries, Set: w.Set.Entries,
		Runs: w.Runs.V, Dispatch: w.Dispatch.Entries, Prefixes: w.Prefixes.Items, Drop: w.Drop.V, Refuse: w.Refuse.V,
	}, nil
}

// FirstSentence is the doc's first sentence.
func (w *Wrapper) FirstSentence() string { return (&Arch{Doc: w.Doc}).FirstSentence() }

// archEntry spells the wrapper's entry of the registry:
//
//	{Name: "mistral3", Tier: "smoke", Doc: "...", Wrapper: &nn.Wrapper{Section: "text_config", Runs: "llama", ...}}
func (w *Wrapper) archEntry() jen.Code {
	defaults := jen.Dict{}
	for _, e := range w.Defaults {
		defaults[jen.Lit(e.Key)] = rawLit(e.Val.V)
	}
	set := jen.Dict{}
	for _, e := range w.Set {
		set[jen.Lit(e.Key)] = rawLit(e.Val.V)
	}
	dispatch := jen.Dict{}
	for _, e := range w.Dispatch {
		dispatch[jen.Lit(e.Key)] = jen.Lit(e.Val.V)
	}
	var prefixes []jen.Code
	for _, p := range w.Prefixes {
		prefixes = append(prefixes, jen.Values(jen.Dict{jen.Id("From"): jen.Lit(p.From.V), jen.Id("To"): jen.Lit(p.To.V)}))
	}
	var refuse []kvPair
	if len(w.Refuse) > 0 {
		refuse = append(refuse, kvPair{"Refuse", strList(w.Refuse)})
	}
	return jen.Values(fieldsOf([]kvPair{
		{"Name", jen.Lit(w.Name)},
		{"Tier", jen.Lit(w.Tier)},
		{"Aliases", strList(w.Aliases)},
		{"Doc", jen.Lit(w.FirstSentence())},
		{"Wrapper", jen.Op("&").Qual(nnPkg, "Wrapper").Values(fieldsOf(slices.Concat([]kvPair{
			{"Section", jen.Lit(w.Section)},
			{"SectionOptional", jen.Lit(w.SectionOptional)},
			{"TopWins", strList(w.TopWins)},
			{"Defaults", jen.Map(jen.String()).Any().Values(defaults)},
		}, w.topDefaultsEntry(), []kvPair{
			{"Set", jen.Map(jen.String()).Any().Values(set)},
			{"Runs", jen.Lit(w.Runs)},
			{"Dispatch", jen.Map(jen.String()).String().Values(dispatch)},
			{"Prefixes", jen.Index().Qual(nnPkg, "Prefix").Values(prefixes...)},
			{"Drop", strList(w.Drop)},
		}, refuse))...)},
	})...)
}

// rawLit spells a YAML scalar as Go; lists and mappings as []any and
// map[string]any.
func rawLit(v any) jen.Code {
	switch x := v.(type) {
	case int64:
		return jen.Lit(int(x))
	case []any:
		var items []jen.Code
		for _, it := range x {
			items = append(items, rawLit(it))
		}
		return jen.Index().Any().Values(items...)
	case map[string]any:
		d := jen.Dict{}
		for _, k := range sortedKeys(x) {
			d[jen.Lit(k)] = rawLit(x[k])
		}
		return jen.Map(jen.String()).Any().Values(d)
	case nil:
		return jen.Nil()
	}
	return jen.Lit(v)
}

// wrapper finds a wrapper by model_type or alias.
func (s *Set) wrapper(name string) *Wrapper {
	for _, w := range s.Wrappers {
		if w.Name == name || slices.Contains(w.Aliases, name) {
			return w
		}
	}
	return nil
}

// checkRefuse checks wrapper.refuse: the section model_types whose text
// model runs on an architecture without a descriptor here. A name there
// that has a descriptor, or that dispatch also names, is an error: a
// descriptor's text models are dispatched to it, not refused.
func checkRefuse(w WrapperDesc, archs map[string]*Descriptor) error {
	for i, name := range w.Refuse.V {
		path := fmt.Sprintf("wrapper.refuse[%d]", i)
		if name == "" {
			return errAt(w.Refuse.Pos, path, "want a model_type")
		}
		for _, e := range w.Dispatch.Entries {
			if e.Key == name {
				return errAt(w.Refuse.Pos, path, "%q is dispatched (wrapper.dispatch.%s), not refused", name, name)
			}
		}
		if _, ok := archs[name]; ok {
			return errAt(w.Refuse.Pos, path, "%q has a descriptor: dispatch it (wrapper.dispatch) instead of refusing it", name)
		}
	}
	return nil
}

// A wrapper's top_defaults: top-level values a config lacks, set before
// top_wins copies them into the section (gemma3's vocab_size is the top
// level's, 262208 when the top level has none, whatever text_config holds).

// checkTopDefaults: each entry has a value and is one of top_wins, which
// is all a top-level value reaches the text model through.
func checkTopDefaults(w *WrapperDesc) error {
	for _, e := range w.TopDefaults.Entries {
		path := "wrapper.top_defaults." + e.Key
		if e.Null {
			return errAt(e.Pos, path, "want a value")
		}
		found := false
		for _, k := range w.TopWins.V {
			found = found || k == e.Key
		}
		if !found {
			return errAt(e.Pos, path, "not in wrapper.top_wins, so the text model would never read it")
		}
	}
	return nil
}

// topDefaultsEntry is the registry entry's TopDefaults, when there are any
// (none: no field, as before the key existed).
func (w *Wrapper) topDefaultsEntry() []kvPair {
	if len(w.TopDefaults) == 0 {
		return nil
	}
	d := jen.Dict{}
	for _, e := range w.TopDefaults {
		d[jen.Lit(e.Key)] = rawLit(e.Val.V)
	}
	return []kvPair{{"TopDefaults", jen.Map(jen.String()).Any().Values(d)}}
}
