package gen

import (
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Extending: a descriptor that extends a base starts from the base's
// values and overrides what it sets itself. Leaves (F, List) are replaced
// whole; structs merge field by field; ordered maps (config keys, derived
// values, checks, test_config) merge by key, an entry set to null removing
// the base's. A config key that sets any of required, default, derive or
// optional replaces the base's choice among them; config.ignore adds to the
// base's list. model_type, doc, tier, aliases and extends are never
// inherited.

// inherit merges base into d.
func inherit(d, base *Descriptor) {
	own := struct {
		mt, doc, ext F[string]
		tier         F[Tier]
		aliases      F[[]string]
	}{d.ModelType, d.Doc, d.Extends, d.Tier, d.Aliases}
	ignore := d.Config.Ignore
	mergeValue(reflect.ValueOf(d).Elem(), deepCopy(reflect.ValueOf(base).Elem()))
	d.ModelType, d.Doc, d.Extends, d.Tier, d.Aliases = own.mt, own.doc, own.ext, own.tier, own.aliases
	if ignore.IsSet() {
		union := append([]string(nil), base.Config.Ignore.V...)
		for _, k := range ignore.V {
			if !slices.Contains(union, k) {
				union = append(union, k)
			}
		}
		sort.Strings(union)
		ignore.V = union
		d.Config.Ignore = ignore
	}
}

func isLeaf(t reflect.Type) bool {
	n := t.String()
	return strings.HasPrefix(n, "gen.F[") || strings.HasPrefix(n, "gen.List[")
}

func isOMap(t reflect.Type) bool { return strings.HasPrefix(t.String(), "gen.OMap[") }

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
func markBase(v reflect.Value) {
	t := v.Type()
	switch {
	case isLeaf(t):
		if o := v.FieldByName("Origin"); Origin(o.Int()) == FromDelta {
			o.SetInt(int64(FromBase))
		}
		if items := v.FieldByName("Items"); items.IsValid() {
			for i := 0; i < items.Len(); i++ {
				markBase(items.Index(i))
			}
		}
	case isOMap(t):
		es := v.FieldByName("Entries")
		for i := 0; i < es.Len(); i++ {
			markBase(es.Index(i).FieldByName("Val"))
		}
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(Raw{}) && t != reflect.TypeOf(Pos{}):
		for i := 0; i < v.NumField(); i++ {
			if t.Field(i).IsExported() {
				markBase(v.Field(i))
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
