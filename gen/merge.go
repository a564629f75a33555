package gen

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
)

// Extending: a descriptor that extends a base starts from the base's
// values and overrides what it sets itself. Leaves (F, List) are replaced
// whole; structs merge field by field; ordered maps (config keys, derived
// values, checks, test_config) merge by key, an entry set to null removing
// the base's. A config key that sets any of required, default, derive or
// optional replaces the base's choice among them; config.ignore adds to the
// base's list, less the keys the descriptor reads itself. model_type, doc, tier, aliases and extends are never
// inherited.

// inherit merges base into d.
func inherit(d, base *Descriptor) {
	own := struct {
		mt, doc, ext, frag F[string]
		tier               F[Tier]
		aliases, include   F[[]string]
	}{d.ModelType, d.Doc, d.Extends, d.Fragment, d.Tier, d.Aliases, d.Include}
	ignore := d.Config.Ignore
	// keys the descriptor reads itself come off the base's ignore list
	reads := map[string]bool{}
	for _, e := range d.Config.Keys.Entries {
		reads[e.Key] = !e.Null
	}
	mergeValue(reflect.ValueOf(d).Elem(), deepCopy(reflect.ValueOf(base).Elem()))
	d.ModelType, d.Doc, d.Extends, d.Fragment, d.Tier, d.Aliases, d.Include = own.mt, own.doc, own.ext, own.frag, own.tier, own.aliases, own.include
	if !ignore.IsSet() && !slices.ContainsFunc(base.Config.Ignore.V, func(k string) bool { return reads[k] }) {
		return
	}
	if !ignore.IsSet() {
		ignore = d.Config.Ignore // the base's, inherited
	}
	var union []string
	for _, k := range base.Config.Ignore.V {
		if !reads[k] {
			union = append(union, k)
		}
	}
	for _, k := range ignore.V {
		if !slices.Contains(union, k) {
			union = append(union, k)
		}
	}
	sort.Strings(union)
	ignore.V = union
	d.Config.Ignore = ignore
}

func isLeaf(t reflect.Type) bool { s := shapeOf(t); return s == leafShape || s == listShape }

func isOMap(t reflect.Type) bool { return shapeOf(t) == omapShape }

// mergeValue fills child (settable) from base where child left things unset.
func mergeValue(child, base reflect.Value) {
	t := child.Type()
	switch {
	case isLeaf(t):
		if !child.FieldByName("Set").Bool() {
			child.Set(base)
			markBase(child)
		}
	case isOMap(t):
		mergeOMap(child, base)
	case t == reflect.TypeOf(KeySpec{}):
		c := child.Addr().Interface().(*KeySpec)
		if c.Required.Set || c.Default.Set || c.Derive.Set || c.Optional.Set {
			b := base.Interface().(KeySpec)
			b.Required, b.Default, b.Derive, b.Optional = F[bool]{}, F[Literal]{}, F[Expr]{}, F[bool]{}
			base = reflect.ValueOf(b)
		}
		mergeStruct(child, base)
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(Raw{}) && t != reflect.TypeOf(Pos{}):
		mergeStruct(child, base)
	}
}

func mergeStruct(child, base reflect.Value) {
	for i := 0; i < child.NumField(); i++ {
		if child.Type().Field(i).IsExported() {
			mergeValue(child.Field(i), base.Field(i))
		}
	}
}

func mergeOMap(child, base reflect.Value) {
	ce, be := child.FieldByName("Entries"), base.FieldByName("Entries")
	out := reflect.MakeSlice(ce.Type(), 0, ce.Len()+be.Len())
	used := map[string]bool{}
	for i := 0; i < be.Len(); i++ {
		b := be.Index(i)
		key := b.FieldByName("Key").String()
		var c reflect.Value
		for j := 0; j < ce.Len(); j++ {
			if ce.Index(j).FieldByName("Key").String() == key {
				c = ce.Index(j)
				used[key] = true
			}
		}
		switch {
		case !c.IsValid():
			e := reflect.New(b.Type()).Elem()
			e.Set(b)
			markBase(e)
			out = reflect.Append(out, e)
		case c.FieldByName("Null").Bool():
			// removed
		default:
			e := reflect.New(c.Type()).Elem()
			e.Set(c)
			mergeValue(e.FieldByName("Val"), b.FieldByName("Val"))
			out = reflect.Append(out, e)
		}
	}
	for j := 0; j < ce.Len(); j++ {
		c := ce.Index(j)
		if !used[c.FieldByName("Key").String()] && !c.FieldByName("Null").Bool() {
			out = reflect.Append(out, c)
		}
	}
	child.FieldByName("Entries").Set(out)
	child.FieldByName("Set").SetBool(child.FieldByName("Set").Bool() || base.FieldByName("Set").Bool())
}

// markBase turns the origin of every value in v from the base's own into
// inherited.
func markBase(v reflect.Value) { markAs(v, FromDelta, FromBase) }

// markAs turns the origin of every value in v from one into another.
func markAs(v reflect.Value, from, to Origin) {
	t := v.Type()
	switch {
	case isLeaf(t):
		if o := v.FieldByName("Origin"); Origin(o.Int()) == from {
			o.SetInt(int64(to))
		}
		if items := v.FieldByName("Items"); items.IsValid() {
			for i := 0; i < items.Len(); i++ {
				markAs(items.Index(i), from, to)
			}
		}
	case isOMap(t):
		es := v.FieldByName("Entries")
		for i := 0; i < es.Len(); i++ {
			markAs(es.Index(i).FieldByName("Val"), from, to)
		}
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(Raw{}) && t != reflect.TypeOf(Pos{}):
		for i := 0; i < v.NumField(); i++ {
			if t.Field(i).IsExported() {
				markAs(v.Field(i), from, to)
			}
		}
	}
}

// Fragments: a fragment (descriptors/fragments/<name>.yaml) is a partial
// descriptor, a bundle of keys, structure and weights that several
// architectures share (a sliding window, a wrapper). A descriptor lists the
// fragments it includes; they merge into it as a base would, below what
// the descriptor writes itself and above what it extends. Two fragments of
// one descriptor may not set the same leaf. Inclusion is a descriptor's
// own: extending a descriptor inherits what its file says (and what it
// extends), not the fragments it includes.

// notInFragments are the top-level keys only a descriptor has.
var notInFragments = []string{"model_type", "tier", "aliases", "extends", "include"}

// compose merges d's fragments (in order) and then base (its lineage,
// without its fragments) into d. frags are the fragments by name.
func compose(d, base *Descriptor, frags map[string]*Descriptor) error {
	var acc *Descriptor
	seen := map[string]string{} // leaf path -> where first set
	for i, name := range d.Include.V {
		path := fmt.Sprintf("include[%d]", i)
		fr, ok := frags[name]
		if !ok {
			return errAt(d.Include.Pos, path, "no fragment %q (want descriptors/fragments/%s.yaml)", name, name)
		}
		if slices.Index(d.Include.V, name) != i {
			return errAt(d.Include.Pos, path, "%q is included twice", name)
		}
		var clash error
		walk(reflect.ValueOf(fr).Elem(), "", fr.file, func(p, _ string, pos Pos, _ Origin) {
			if p == "doc" || p == "fragment" {
				return
			}
			if prev, dup := seen[p]; dup && clash == nil {
				clash = errAt(pos, p, "set by fragment %s and by %s; a descriptor's fragments may not overlap", name, prev)
			}
			seen[p] = "fragment " + name + " (" + pos.String() + ")"
		})
		if clash != nil {
			return clash
		}
		c := deepCopy(reflect.ValueOf(fr).Elem())
		markAs(c, FromDelta, FromFragment)
		cd := c.Addr().Interface().(*Descriptor)
		if acc == nil {
			acc = cd
		} else {
			inherit(acc, cd)
		}
	}
	if base != nil {
		if acc == nil {
			inherit(d, base)
			return nil
		}
		inherit(acc, base)
	}
	if acc != nil {
		inherit(d, acc)
		fragmentsLast(reflect.ValueOf(d).Elem())
	}
	return nil
}

// fragmentsLast moves the entries a fragment brought to the end of each
// ordered map, so that a descriptor's own keys keep their order.
func fragmentsLast(v reflect.Value) {
	t := v.Type()
	switch {
	case isOMap(t):
		es := v.FieldByName("Entries")
		out := reflect.MakeSlice(es.Type(), 0, es.Len())
		for _, last := range []bool{false, true} {
			for i := 0; i < es.Len(); i++ {
				if isFragment(es.Index(i).FieldByName("Pos").Interface().(Pos).File) == last {
					out = reflect.Append(out, es.Index(i))
				}
			}
		}
		es.Set(out)
	case t.Kind() == reflect.Struct && !isLeaf(t) && t != reflect.TypeOf(Raw{}) && t != reflect.TypeOf(Pos{}):
		for i := 0; i < v.NumField(); i++ {
			if t.Field(i).IsExported() {
				fragmentsLast(v.Field(i))
			}
		}
	}
}

// deepCopy copies a descriptor's tree, so that merging into one child never
// touches the base another child inherits from.
func deepCopy(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	out.Set(v)
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(deepCopy(v.Field(i)))
			}
		}
	case reflect.Slice:
		if v.IsNil() {
			return out
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := 0; i < v.Len(); i++ {
			s.Index(i).Set(deepCopy(v.Index(i)))
		}
		out.Set(s)
	}
	return out
}
