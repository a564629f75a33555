package gen

import "github.com/dave/jennifer/jen"

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
