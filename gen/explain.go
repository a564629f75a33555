package gen

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
)

// Explain is the resolved descriptor of model_type name (or of the arch an
// alias runs on): every value, one per line, with where it came from: the
// descriptor itself (its file and line), its base (through extends), or
// the language's default.
func Explain(s *Set, name string) (string, error) {
	a := s.Arch(name)
	if w := s.wrapper(name); w != nil {
		a = &Arch{Name: w.Name, File: w.File, Doc: w.Doc}
	}
	if a == nil {
		if t, ok := s.Remapped[name]; ok {
			return "", fmt.Errorf("%q is an alias of %q, which has no descriptor", name, t)
		}
		return "", fmt.Errorf("no descriptor or alias %q", name)
	}
	d := s.Flat[a.Name]
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s", a.Name, a.File)
	if a.Extends != "" {
		fmt.Fprintf(&b, ", extends %s", a.Extends)
	}
	if len(a.Includes) > 0 {
		fmt.Fprintf(&b, ", includes %s", strings.Join(a.Includes, ", "))
	}
	b.WriteString(")\n\n")
	b.WriteString(wrapText(a.Doc))
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	walk(reflect.ValueOf(d).Elem(), "", a.File, func(path, value string, p Pos, o Origin) {
		if path != "doc" {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", path, value, origin(o, p))
		}
	})
	tw.Flush()
	return b.String(), nil
}

func origin(o Origin, p Pos) string {
	switch o {
	case FromDelta:
		return "# here, " + p.String()
	case FromBase:
		return "# inherited, " + p.String()
	case FromFragment:
		return "# fragment, " + p.String()
	}
	return "# default"
}

// walk visits every set leaf of a descriptor tree: its path, value, and
// where it was written.
func walk(v reflect.Value, path, file string, visit func(path, value string, pos Pos, o Origin)) {
	t := v.Type()
	switch {
	case strings.HasPrefix(t.String(), "gen.F["):
		if !v.FieldByName("Set").Bool() {
			return
		}
		val := "null"
		if !v.FieldByName("Null").Bool() {
			val = leafString(v.FieldByName("V").Interface())
		}
		visit(path, val, v.FieldByName("Pos").Interface().(Pos), Origin(v.FieldByName("Origin").Int()))
	case strings.HasPrefix(t.String(), "gen.List["):
		if !v.FieldByName("Set").Bool() {
			return
		}
		items := v.FieldByName("Items")
		if items.Len() == 0 {
			visit(path, "[]", v.FieldByName("Pos").Interface().(Pos), Origin(v.FieldByName("Origin").Int()))
		}
		for i := 0; i < items.Len(); i++ {
			walk(items.Index(i), fmt.Sprintf("%s[%d]", path, i), file, visit)
		}
	case strings.HasPrefix(t.String(), "gen.OMap["):
		es := v.FieldByName("Entries")
		for i := 0; i < es.Len(); i++ {
			e := es.Index(i)
			walk(e.FieldByName("Val"), join(path, e.FieldByName("Key").String()), file, visit)
			if path == "structure.mixers" {
				mixerDefaults(e, join(path, e.FieldByName("Key").String()), visit)
			}
		}
	case t == reflect.TypeOf(Raw{}):
		p := v.FieldByName("Pos").Interface().(Pos)
		o := FromDelta
		if strings.Contains(p.File, "/fragments/") {
			o = FromFragment
		} else if p.File != file {
			o = FromBase
		}
		visit(path, leafString(v.FieldByName("V").Interface()), p, o)
	case t.Kind() == reflect.Struct && t != reflect.TypeOf(Pos{}):
		for i := 0; i < t.NumField(); i++ {
			tag := t.Field(i).Tag.Get("yaml")
			if tag == "" || tag == "-" {
				continue
			}
			walk(v.Field(i), join(path, tag), file, visit)
		}
	}
}

// mixerDefaults visits the options a mixer section leaves to its kind's
// defaults (a kind's options live in its file, not in the descriptor
// tree).
func mixerDefaults(e reflect.Value, path string, visit func(path, value string, pos Pos, o Origin)) {
	k, ok := mixerKinds[e.FieldByName("Key").String()]
	if !ok {
		return
	}
	set := map[string]bool{}
	entries := e.FieldByName("Val").FieldByName("Entries")
	for i := 0; i < entries.Len(); i++ {
		set[entries.Index(i).FieldByName("Key").String()] = true
	}
	if !set["block"] {
		visit(join(path, "block"), "same", Pos{}, FromDefault)
	}
	for _, opt := range k.options {
		if set[opt.key] {
			continue
		}
		val := opt.def
		if opt.like != "" {
			val = "(" + opt.like + "'s value)"
		}
		visit(join(path, opt.key), val, Pos{}, FromDefault)
	}
}

func leafString(v any) string {
	switch x := v.(type) {
	case string:
		return strings.Join(strings.Fields(x), " ")
	case Expr:
		return x.Text
	case Literal:
		return leafString(x.V)
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case []any:
		var parts []string
		for _, it := range x {
			parts = append(parts, leafString(it))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		var parts []string
		for _, k := range sortedKeys(x) {
			parts = append(parts, k+": "+leafString(x[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case float64:
		return fmtFloat(x)
	}
	return fmt.Sprint(v)
}

// Listing is the table archgen list prints: every architecture with its tier
// and aliases, then the model_types refused by name.
func Listing(s *Set) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL_TYPE\tTIER\tALIASES\tEXTENDS")
	for _, a := range s.Archs {
		al, ext := "-", "-"
		if len(a.Aliases) > 0 {
			al = strings.Join(a.Aliases, ", ")
		}
		if a.Extends != "" {
			ext = a.Extends
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, a.Tier, al, ext)
	}
	for _, w := range s.Wrappers {
		al := "-"
		if len(w.Aliases) > 0 {
			al = strings.Join(w.Aliases, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", w.Name, w.Tier, al, "wraps "+w.Runs)
	}
	tw.Flush()
	var refused []string
	for _, k := range sortedKeys(s.Remapped) {
		refused = append(refused, fmt.Sprintf("%s (an alias of %s)", k, s.Remapped[k]))
	}
	for _, d := range s.Drafters {
		refused = append(refused, d+" (a drafter)")
	}
	sort.Strings(refused)
	if len(refused) > 0 {
		fmt.Fprintf(&b, "\nrefused: %s\n", strings.Join(refused, ", "))
	}
	return b.String()
}
