package gen

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Pos is where a value was written: a descriptor file and a line.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.File == "" {
		return "(default)"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Error is a problem in a descriptor, at a position and a key path:
// "descriptors/qwen2.yaml:14: structure.mlp.kind: unknown "gegl"".
type Error struct {
	Pos  Pos
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.File != "" {
		b.WriteString(e.Pos.File)
		if e.Pos.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Pos.Line)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func errAt(pos Pos, path, format string, args ...any) *Error {
	return &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// Origin says where a resolved value came from.
type Origin int

const (
	// FromDefault is the language's default (descriptors/README.md).
	FromDefault Origin = iota
	// FromBase is inherited through extends.
	FromBase
	// FromDelta is written in the descriptor itself.
	FromDelta
	// FromFragment comes from a fragment the descriptor includes.
	FromFragment
)

// F is one settable leaf of a descriptor: its value, whether the file set
// it (Null when it was set to null, meaning "back to the default"), and
// where.
type F[T any] struct {
	V      T
	Set    bool
	Null   bool
	Pos    Pos
	Origin Origin
}

// IsSet reports a non-null value.
func (f F[T]) IsSet() bool { return f.Set && !f.Null }

// enum is a string type whose values are a fixed list.
type enum interface {
	values() []string
}

// Entry is one key of an ordered mapping.
type Entry[V any] struct {
	Key  string
	Pos  Pos
	Null bool // written as key: null (removes an inherited entry)
	Val  V
}

// OMap is a mapping whose order is kept as written.
type OMap[V any] struct {
	Entries []Entry[V]
	Set     bool
	Pos     Pos
}

// List is a sequence of structs, set as a whole.
type List[T any] struct {
	Items  []T
	Set    bool
	Pos    Pos
	Origin Origin
}

// Raw is a YAML value as plain Go values (bool, int64, float64, string,
// nil, []any, map[string]any), for test configs; maps are written out
// sorted.
type Raw struct {
	V   any
	Pos Pos
}

// decoder turns yaml nodes into descriptor structs, strictly.
type decoder struct {
	file string
}

// shape is what the decoder and the merger take a descriptor type for;
// F, OMap and List say theirs by a method, so that neither depends on the
// types' names or the package they live in.
type shape int

const (
	plainShape shape = iota // a struct of sections, an enum, Raw
	leafShape               // F: one settable value
	omapShape               // OMap: an ordered mapping
	listShape               // List: a sequence set as a whole
)

type shaped interface{ shape() shape }

func (F[T]) shape() shape    { return leafShape }
func (OMap[V]) shape() shape { return omapShape }
func (List[T]) shape() shape { return listShape }

// shapeOf is t's shape.
func shapeOf(t reflect.Type) shape {
	if s, ok := reflect.Zero(t).Interface().(shaped); ok {
		return s.shape()
	}
	return plainShape
}

func (d *decoder) pos(n *yaml.Node) Pos { return Pos{File: d.file, Line: n.Line} }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("%q", n.Value)
	case "!!null":
		return "null"
	}
	return n.Value
}

// decode fills v (a pointer) from n; path names the key in messages.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		return errAt(d.pos(n), path, "YAML aliases are not supported")
	}
	t := v.Type()
	switch shapeOf(t) {
	case leafShape:
		return d.leaf(n, v, path)
	case omapShape:
		return d.omap(n, v, path)
	case listShape:
		return d.list(n, v, path)
	}
	switch {
	case t == reflect.TypeOf(Raw{}):
		raw, err := d.raw(n, path)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(Raw{V: raw, Pos: d.pos(n)}))
		return nil
	case t.Kind() == reflect.Struct:
		return d.structure(n, v, path)
	}
	return fmt.Errorf("gen: cannot decode into %s", t)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// structure decodes a mapping into a struct by yaml tags; an unknown key
// is an error.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return nil
		}
		return errAt(d.pos(n), path, "want a mapping, got %s", kindName(n))
	}
	t := v.Type()
	fields := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fields[tag] = i
		names = append(names, tag)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		kp := join(path, key)
		if line, dup := seen[key]; dup {
			return errAt(d.pos(k), kp, "repeated key (first at line %d)", line)
		}
		seen[key] = k.Line
		fi, ok := fields[key]
		if !ok {
			sort.Strings(names)
			return errAt(d.pos(k), kp, "unknown key (want one of %s)", strings.Join(names, ", "))
		}
		if err := d.decode(val, v.Field(fi), kp); err != nil {
			return err
		}
	}
	if p := v.FieldByName("Pos"); p.IsValid() && p.Type() == reflect.TypeOf(Pos{}) {
		p.Set(reflect.ValueOf(d.pos(n)))
	}
	return nil
}

// leaf decodes a scalar (or a list of strings) into an F[T].
func (d *decoder) leaf(n *yaml.Node, v reflect.Value, path string) error {
	v.FieldByName("Set").SetBool(true)
	v.FieldByName("Pos").Set(reflect.ValueOf(d.pos(n)))
	v.FieldByName("Origin").Set(reflect.ValueOf(FromDelta))
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		v.FieldByName("Null").SetBool(true)
		return nil
	}
	dst := v.FieldByName("V")
	if e, ok := dst.Addr().Interface().(enum); ok {
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return errAt(d.pos(n), path, "want one of %s, got %s", strings.Join(e.values(), ", "), kindName(n))
		}
		for _, s := range e.values() {
			if s == n.Value {
				dst.SetString(n.Value)
				return nil
			}
		}
		return errAt(d.pos(n), path, "unknown %q (want one of %s)", n.Value, strings.Join(e.values(), ", "))
	}
	switch dst.Interface().(type) {
	case Expr:
		if n.Kind != yaml.ScalarNode {
			return errAt(d.pos(n), path, "want an expression, got %s", kindName(n))
		}
		dst.Set(reflect.ValueOf(Expr{Text: n.Value, Pos: d.pos(n)}))
		return nil
	case Literal:
		raw, err := d.raw(n, path)
		if err != nil {
			return err
		}
		dst.Set(reflect.ValueOf(Literal{V: raw}))
		return nil
	case string:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			return errAt(d.pos(n), path, "want a string, got %s", kindName(n))
		}
		dst.SetString(n.Value)
		return nil
	case bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return errAt(d.pos(n), path, "want true or false, got %s", kindName(n))
		}
		dst.SetBool(n.Value == "true")
		return nil
	case float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			return errAt(d.pos(n), path, "want a number, got %s", kindName(n))
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			return errAt(d.pos(n), path, "want a number, got %s", kindName(n))
		}
		dst.SetFloat(f)
		return nil
	case int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return errAt(d.pos(n), path, "want an integer, got %s", kindName(n))
		}
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return errAt(d.pos(n), path, "want an integer, got %s", kindName(n))
		}
		dst.SetInt(i)
		return nil
	case []string:
		if n.Kind != yaml.SequenceNode {
			return errAt(d.pos(n), path, "want a list of strings, got %s", kindName(n))
		}
		out := make([]string, 0, len(n.Content))
		for i, it := range n.Content {
			if it.Kind != yaml.ScalarNode || it.Tag != "!!str" {
				return errAt(d.pos(it), fmt.Sprintf("%s[%d]", path, i), "want a string, got %s", kindName(it))
			}
			out = append(out, it.Value)
		}
		dst.Set(reflect.ValueOf(out))
		return nil
	}
	return fmt.Errorf("gen: no leaf decoder for %s", dst.Type())
}

// omap decodes a mapping whose keys are names (config keys, checks, ...).
func (d *decoder) omap(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return errAt(d.pos(n), path, "want a mapping, got %s", kindName(n))
	}
	v.FieldByName("Set").SetBool(true)
	v.FieldByName("Pos").Set(reflect.ValueOf(d.pos(n)))
	entries := v.FieldByName("Entries")
	et := entries.Type().Elem()
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return errAt(d.pos(k), path, "want a name as key, got %s", kindName(k))
		}
		if line, dup := seen[k.Value]; dup {
			return errAt(d.pos(k), kp, "repeated key (first at line %d)", line)
		}
		seen[k.Value] = k.Line
		e := reflect.New(et).Elem()
		e.FieldByName("Key").SetString(k.Value)
		e.FieldByName("Pos").Set(reflect.ValueOf(d.pos(k)))
		if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
			e.FieldByName("Null").SetBool(true)
		} else if err := d.decode(val, e.FieldByName("Val"), kp); err != nil {
			return err
		}
		entries.Set(reflect.Append(entries, e))
	}
	return nil
}

// list decodes a sequence of structs.
func (d *decoder) list(n *yaml.Node, v reflect.Value, path string) error {
	v.FieldByName("Set").SetBool(true)
	v.FieldByName("Pos").Set(reflect.ValueOf(d.pos(n)))
	v.FieldByName("Origin").Set(reflect.ValueOf(FromDelta))
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return errAt(d.pos(n), path, "want a list, got %s", kindName(n))
	}
	items := v.FieldByName("Items")
	for i, it := range n.Content {
		e := reflect.New(items.Type().Elem()).Elem()
		if err := d.decode(it, e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
		items.Set(reflect.Append(items, e))
	}
	return nil
}

// raw turns a YAML value into plain Go values: bool, int64, float64,
// string, nil, []any, and map[string]any.
func (d *decoder) raw(n *yaml.Node, path string) (any, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			return n.Value == "true", nil
		case "!!int":
			i, err := strconv.ParseInt(n.Value, 0, 64)
			if err != nil {
				return nil, errAt(d.pos(n), path, "bad integer %s", n.Value)
			}
			return i, nil
		case "!!float":
			var f float64
			err := n.Decode(&f) // YAML's forms too: .inf, -.inf
			if err != nil {
				return nil, errAt(d.pos(n), path, "bad number %s", n.Value)
			}
			return f, nil
		}
		return n.Value, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, it := range n.Content {
			v, err := d.raw(it, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if _, dup := out[k]; dup {
				return nil, errAt(d.pos(n.Content[i]), join(path, k), "repeated key")
			}
			v, err := d.raw(n.Content[i+1], join(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
	return nil, errAt(d.pos(n), path, "YAML aliases are not supported")
}

// yamlLine reads the line of a yaml.v3 syntax error ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile decodes one descriptor file's text.
func parseFile(file string, data []byte, into any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &Error{Pos: Pos{File: file, Line: line}, Msg: m[2]}
		}
		return &Error{Pos: Pos{File: file}, Msg: strings.TrimPrefix(msg, "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return &Error{Pos: Pos{File: file}, Msg: "empty file"}
	}
	d := &decoder{file: file}
	return d.decode(doc.Content[0], reflect.ValueOf(into).Elem(), "")
}
