package gen

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/dave/jennifer/jen"
)

// The resolved model of an architecture: every default applied, extends
// flattened, every expression checked and spelled in Go, every structural
// choice made. Emitters read it and only spell Go.

// Arch is one resolved architecture.
type Arch struct {
	Name     string // model_type
	File     string // descriptors/<name>.yaml
	Doc      string
	Tier     string
	Aliases  []string
	Extends  string   // the base's model_type, "" when none
	Includes []string // the fragments it includes

	Keys    []*Key
	Derived []*Derived
	Checks  []*Check
	Ignored []string
	// TestConfig is the descriptor's test_config: a small config.json.
	TestConfig map[string]any

	Layers, Hidden, Vocab *Value
	// The network's components (component.go).
	Norm *Norm
	// FinalNorm is the final norm's: Norm, or it with structure.norm.final_eps.
	FinalNorm *Norm
	Embed     *Embed
	Block     *Block
	Attn      *Attention
	Mixers    *Mixers // nil: attention mixes every layer
	Rope      *Rope
	MLP       *MLP
	Head      *Head
	Encoder   *Encoder // nil: a decoder
	// PerLayer are the per-layer inputs; nil: none (per_layer_inputs.go).
	PerLayer *PerLayerInputs
	// Variants run configs of the model_type on other descriptors
	// (variant.go).
	Variants []*Variant
	Scalars  Scalars
	Names    ResolvedNames
	Drops    []Drop
	// Renames are weights.rename, applied first (weights_rename.go).
	Renames []Rename
	// Bare are weights.bare's suffixes (nil: none; weights_bare.go).
	Bare []string
	// UnitRows are weights.unit_rows (weights_unit_rows.go).
	UnitRows []UnitRows
	// Fold is weights.fold; nil when none (weights_fold.go).
	Fold *Fold
	// NormShift is weights.norm_shift; nil when none.
	NormShift *NormShift
	GGUF      *GGUF // nil: no GGUF support

	derivationOrder []string
	values          []*Value // every expression, in the order compiled
}

// Key is one config.json key the architecture reads.
type Key struct {
	Name    string // as in config.json
	Field   string // Go field of Config
	Type    Type
	Mode    string // required, default, derive or optional
	Default any    // Go value of the literal, for default
	// Null, where set (with default), is the value of a key the config
	// holds as null: mlx-lm's dataclass then takes None over its default.
	Null     any
	Derive   *Value
	Fallback []string
	Prefer   []string
	Auto     bool // "auto" reads as absent
	Min      *float64
	Length   *Value
	Doc      string
}

// Derived is a value computed from the config.
type Derived struct {
	Name, Field string
	Type        Type
	Expr        *Value
	Min         *float64
	Doc         string
}

// Check is a condition on the config.
type Check struct {
	Name    string
	Expr    *Value
	Key     string
	Message string
}

// Value is a checked expression.
type Value struct {
	Text  string
	Type  Type
	Pos   Pos
	code  *jen.Statement
	lit   any
	isLit bool
	refs  []string
	path  string // its key path in the descriptor
}

// Code spells the value in Go.
func (v *Value) Code() *jen.Statement { return v.code.Clone() }

// IsTrue and IsFalse tell a literal bool apart from a config-driven one.
func (v *Value) IsTrue() bool  { b, ok := v.lit.(bool); return v.isLit && ok && b }
func (v *Value) IsFalse() bool { b, ok := v.lit.(bool); return v.isLit && ok && !b }

// IsZero tells a literal 0 (an int or a float) apart from other values.
func (v *Value) IsZero() bool {
	switch x := v.lit.(type) {
	case float64:
		return v.isLit && x == 0
	case int:
		return v.isLit && x == 0
	}
	return false
}

// Float32 spells the value as a float32 (for kernels that take one).
func (v *Value) Float32() *jen.Statement { return jen.Float32().Call(v.Code()) }

// ResolvedNames are the checkpoint names by role.
type ResolvedNames struct {
	Model, Embed, Layers, Norm, LMHead, Attention, MLP string
	Positions, TokenTypes                              string
	Q, K, V, O, QKV, QNorm, KNorm                      string
	Gate, Up, Down, GateUp, FC, Proj                   string
	AttnIn, AttnOut, MLPIn, MLPOut                     string
}

// Drop is a tensor loading drops.
type Drop struct {
	Name, Contains string
	Layer          *Value // nil: not a layer's tensors
	When           *Value // nil: always
}

// ---- building ----

type builder struct {
	d      *Descriptor
	a      *Arch
	types  map[string]Type
	min    map[string]float64
	plain  map[string]bool   // keys read as such (not derived when absent)
	fields map[string]string // Config's Go fields, by the name they spell
}

// nameRE is a config key or derived value that is also an expression's
// name and a Go field once in CamelCase.
var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// claimField checks that a config key or derived value makes a Go field of
// Config of its own.
func (b *builder) claimField(name string, pos Pos, path string) error {
	if !nameRE.MatchString(name) {
		return errAt(pos, path, "%q is not a name (letters, digits and _, not first a digit)", name)
	}
	f := goName(name)
	if f == "" {
		return errAt(pos, path, "%q makes no Go name", name)
	}
	if f == "ModelType" {
		return errAt(pos, path, "is spelled ModelType in Go, which model_type is")
	}
	if prev, dup := b.fields[f]; dup {
		return errAt(pos, path, "is spelled %s in Go, as %s is", f, prev)
	}
	b.fields[f] = name
	return nil
}

func build(d *Descriptor) (*Arch, error) {
	a := &Arch{
		Name:     d.ModelType.V,
		File:     d.file,
		Doc:      strings.TrimSpace(d.Doc.V),
		Tier:     string(d.Tier.V),
		Aliases:  d.Aliases.V,
		Extends:  d.Extends.V,
		Includes: d.Include.V,
	}
	if a.Doc == "" {
		return nil, errAt(Pos{File: d.file, Line: 1}, "doc", "missing (required): a paragraph on the architecture")
	}
	b := &builder{d: d, a: a, types: map[string]Type{"model_type": TString}, min: map[string]float64{}, plain: map[string]bool{}, fields: map[string]string{}}
	steps := []func() error{b.keys, b.derived, b.keyExprs, b.structure, b.checks, b.variants, b.renames, b.bare, b.drops, b.resolveNormShift, b.resolveFold, b.unitRows, b.gguf, b.testConfig}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// keys declares the config keys.
func (b *builder) keys() error {
	ignored := map[string]bool{}
	for _, k := range b.d.Config.Ignore.V {
		ignored[k] = true
	}
	for _, e := range b.d.Config.Keys.Entries {
		path := "config.keys." + e.Key
		if ignored[e.Key] {
			if e.Val.Type.Origin == FromDelta {
				return errAt(e.Pos, path, "both read and listed in config.ignore")
			}
			continue // an inherited key this descriptor ignores
		}
		ks := e.Val
		if !ks.Type.IsSet() {
			return errAt(e.Pos, path+".type", "missing (required)")
		}
		k := &Key{Name: e.Key, Field: goName(e.Key), Type: ks.Type.V, Fallback: ks.Fallback.V, Prefer: ks.Prefer.V, Doc: ks.Doc.V}
		k.Auto = ks.Auto.V
		if k.Auto && !ks.Derive.IsSet() {
			return errAt(ks.Auto.Pos, path+".auto", "\"auto\" reads as absent, and only derive gives an absent key its value")
		}
		if ks.Prefer.IsSet() && ks.Derive.IsSet() {
			return errAt(ks.Prefer.Pos, path+".prefer", "a derived key reads no other place first")
		}
		if e.Key == "model_type" {
			return errAt(e.Pos, path, "model_type is always read; do not list it")
		}
		if err := b.claimField(e.Key, e.Pos, path); err != nil {
			return err
		}
		var modes []string
		if ks.Required.IsSet() && ks.Required.V {
			modes = append(modes, "required")
		}
		if ks.Default.IsSet() {
			modes = append(modes, "default")
		}
		if ks.Derive.IsSet() {
			modes = append(modes, "derive")
		}
		if ks.Optional.IsSet() && ks.Optional.V {
			modes = append(modes, "optional")
		}
		if len(modes) != 1 {
			return errAt(e.Pos, path, "needs exactly one of required: true, default, derive and optional: true (has %d)", len(modes))
		}
		k.Mode = modes[0]
		if k.Mode == "default" {
			v, err := literalValue(ks.Default.V.V, k.Type)
			if err != nil {
				return errAt(ks.Default.Pos, path+".default", "%v", err)
			}
			k.Default = v
		}
		if ks.Null.IsSet() {
			if k.Mode != "default" {
				return errAt(ks.Null.Pos, path+".null", "only a key with a default reads null as a value of its own (otherwise null reads as absent)")
			}
			v, err := literalValue(ks.Null.V.V, k.Type)
			if err != nil {
				return errAt(ks.Null.Pos, path+".null", "%v", err)
			}
			k.Null = v
		}
		if ks.Min.IsSet() {
			if !numeric(k.Type) {
				return errAt(ks.Min.Pos, path+".min", "only numbers have a minimum")
			}
			m := ks.Min.V
			k.Min = &m
			b.min[e.Key] = m
		}
		if ks.Length.IsSet() && k.Type.elem() == "" {
			return errAt(ks.Length.Pos, path+".length", "only lists have a length")
		}
		b.types[e.Key] = k.Type
		if k.Mode != "derive" {
			b.plain[e.Key] = true
		}
		b.a.Keys = append(b.a.Keys, k)
	}
	b.a.Ignored = append([]string(nil), b.d.Config.Ignore.V...)
	sort.Strings(b.a.Ignored)
	return nil
}

func (b *builder) derived() error {
	for _, e := range b.d.Config.Derived.Entries {
		path := "config.derived." + e.Key
		if _, dup := b.types[e.Key]; dup {
			return errAt(e.Pos, path, "is also a config key")
		}
		if !e.Val.Type.IsSet() {
			return errAt(e.Pos, path+".type", "missing (required)")
		}
		if !e.Val.Expr.IsSet() {
			return errAt(e.Pos, path+".expr", "missing (required)")
		}
		dv := &Derived{Name: e.Key, Field: goName(e.Key), Type: e.Val.Type.V, Doc: e.Val.Doc.V}
		if err := b.claimField(e.Key, e.Pos, path); err != nil {
			return err
		}
		if e.Val.Min.IsSet() {
			m := e.Val.Min.V
			dv.Min = &m
			b.min[e.Key] = m
		}
		b.types[e.Key] = dv.Type
		b.a.Derived = append(b.a.Derived, dv)
	}
	return nil
}

// scope is where expressions of a stage may look. Integer division needs
// a divisor known to be positive: at parse time, a key read directly with a
// minimum of 1; later, any key or derived value with one.
func (b *builder) scope(stage string) *scope {
	sc := &scope{
		names: b.types,
		code: func(name string) jen.Code {
			return jen.Id("c").Dot(goName(name))
		},
		positive: func(name string) bool {
			m, ok := b.min[name]
			if !ok || m < 1 {
				return false
			}
			return stage != "parse" || b.plain[name]
		},
		indexable: func(name string) bool { return b.indexable(name) },
		fixed:     func(name string) int { return b.fixedLength(name) },
		unchecked: stage == "parse" || stage == "check",
	}
	if b.a.Layers != nil {
		sc.layers = b.a.Layers.Code()
	}
	return sc
}

// indexable: a list with one entry per layer, checked at parse time.
func (b *builder) indexable(name string) bool {
	if b.a.Layers == nil {
		return false
	}
	for _, k := range b.a.Keys {
		if k.Name == name {
			return k.Length != nil && strings.TrimSpace(k.Length.Text) == strings.TrimSpace(b.a.Layers.Text)
		}
	}
	for _, d := range b.a.Derived {
		if d.Name == name {
			return strings.HasPrefix(strings.TrimSpace(d.Expr.Text), "layers(")
		}
	}
	return false
}

// fixedLength is the length of a list key whose length is an int literal
// (checked at parse time), 0 for any other.
func (b *builder) fixedLength(name string) int {
	for _, k := range b.a.Keys {
		if k.Name == name && k.Length != nil {
			if n, err := strconv.Atoi(strings.TrimSpace(k.Length.Text)); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// value compiles an expression leaf of type want (an int where a float is
// wanted is converted).
func (b *builder) value(f F[Expr], path string, want Type, sc *scope) (*Value, error) {
	pos := f.Pos
	if pos.File == "" {
		pos.File = b.d.file
	}
	t, err := compile(f.V.Text, sc)
	if err != nil {
		if f.Origin == FromDefault {
			return nil, errAt(pos, path, "%v (in the default %q; set it)", err, f.V.Text)
		}
		return nil, errAt(pos, path, "%v", err)
	}
	if t.t != want {
		if want == TFloat && t.t == TInt {
			t = asFloat(t)
		} else {
			return nil, errAt(pos, path, "%q is %s, want %s", f.V.Text, t.t, want)
		}
	}
	v := &Value{Text: f.V.Text, Type: want, Pos: pos, code: t.code, refs: t.refs, path: path}
	b.a.values = append(b.a.values, v)
	if lit, ok := literalOf(f.V.Text); ok {
		v.lit, v.isLit = lit, true
		if want == TFloat {
			if i, isInt := lit.(int); isInt {
				v.lit = float64(i)
			}
		}
	}
	return v, nil
}

// optValue is value for a leaf that may be unset (nil).
func (b *builder) optValue(f F[Expr], path string, want Type, sc *scope) (*Value, error) {
	if !f.IsSet() {
		return nil, nil
	}
	return b.value(f, path, want, sc)
}

// keyExprs compiles derive and length expressions and orders the
// derivations so that each runs after what it reads.
func (b *builder) keyExprs() error {
	// The layer count is needed for layers(...) at parse time.
	sc := b.scope("parse")
	layers, err := b.value(b.d.Structure.Layers, "structure.layers", TInt, sc)
	if err != nil {
		return err
	}
	b.a.Layers = layers
	sc = b.scope("parse")
	byName := map[string]*KeySpec{}
	for i := range b.d.Config.Keys.Entries {
		e := &b.d.Config.Keys.Entries[i]
		byName[e.Key] = &e.Val
	}
	for _, k := range b.a.Keys {
		ks := byName[k.Name]
		path := "config.keys." + k.Name
		if k.Mode == "derive" {
			if k.Derive, err = b.value(ks.Derive, path+".derive", k.Type, sc); err != nil {
				return err
			}
		}
		if ks.Length.IsSet() {
			if k.Length, err = b.value(ks.Length, path+".length", TInt, sc); err != nil {
				return err
			}
		}
	}
	dspecs := map[string]*DerivedSpec{}
	for i := range b.d.Config.Derived.Entries {
		e := &b.d.Config.Derived.Entries[i]
		dspecs[e.Key] = &e.Val
	}
	for _, d := range b.a.Derived {
		if d.Expr, err = b.value(dspecs[d.Name].Expr, "config.derived."+d.Name+".expr", d.Type, sc); err != nil {
			return err
		}
	}
	return b.orderDerivations()
}

// orderDerivations sorts derived values (and keys derived when absent) so
// each comes after the derived things it reads; a cycle is an error.
func (b *builder) orderDerivations() error {
	deps := map[string][]string{}
	pos := map[string]Pos{}
	derivedKey := map[string]bool{}
	for _, k := range b.a.Keys {
		if k.Derive != nil {
			deps[k.Name] = k.Derive.refs
			pos[k.Name] = k.Derive.Pos
			derivedKey[k.Name] = true
		}
	}
	for _, d := range b.a.Derived {
		deps[d.Name] = d.Expr.refs
		pos[d.Name] = d.Expr.Pos
	}
	state := map[string]int{}
	var order []string
	var visit func(n string, chain []string) error
	visit = func(n string, chain []string) error {
		switch state[n] {
		case 1:
			return errAt(pos[n], "config", "derivations form a cycle: %s", strings.Join(append(chain, n), " -> "))
		case 2:
			return nil
		}
		state[n] = 1
		for _, r := range deps[n] {
			if _, ok := deps[r]; ok {
				if err := visit(r, append(chain, n)); err != nil {
					return err
				}
			}
		}
		state[n] = 2
		order = append(order, n)
		return nil
	}
	var names []string
	for _, k := range b.a.Keys {
		if k.Derive != nil {
			names = append(names, k.Name)
		}
	}
	for _, d := range b.a.Derived {
		names = append(names, d.Name)
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return err
		}
	}
	b.a.derivationOrder = order
	return nil
}

// structure resolves the network: each component its own section, in an
// order where each finds what it reads already resolved, then the
// checkpoint names, the links between components, and the block.
func (b *builder) structure() error {
	sc := b.scope("load")
	for _, resolve := range []func(*scope) error{
		b.resolveSizes, b.resolveNorm, b.scalars, b.resolveAttention, b.resolveRope, b.resolveMLP, b.resolveHead, b.resolveMixers, b.resolveSingle,
	} {
		if err := resolve(sc); err != nil {
			return err
		}
	}
	if err := b.names(); err != nil {
		return err
	}
	if err := b.resolveEncoder(sc); err != nil {
		return err
	}
	if err := b.resolvePerLayerInputs(sc); err != nil {
		return err
	}
	a := b.a
	a.Embed = &Embed{}
	positions, err := b.optValue(b.d.Structure.Positions, "structure.positions", TInt, sc)
	if err != nil {
		return err
	}
	a.Embed.positions = positions
	if n := b.d.Structure.EmbedNorm; n.IsSet() && n.V != "" {
		if !tensorPath.MatchString(n.V) && !checkpointName.MatchString(n.V) {
			return errAt(n.Pos, "structure.embed_norm", "%q is not a checkpoint name (dotted words or indices)", n.V)
		}
		a.Embed.normName = n.V
	}
	a.Embed.link(a)
	a.Attn.link(a)
	if a.Mixers != nil {
		// A layer holds attention only where no other mixer claims it.
		a.Attn.Field.typ = func() *jen.Statement { return jen.Op("*").Id("Attention") }
	}
	a.Rope.link()
	a.MLP.link(a)
	a.Head.link(a)
	if err := b.resolveBlock(); err != nil {
		return err
	}
	if err := b.resolveVariants(); err != nil {
		return err
	}
	a.sublayerFieldNames()
	return b.uniqueFields()
}

// resolveSizes resolves structure.hidden and structure.vocab.
func (b *builder) resolveSizes(sc *scope) error {
	l := b.leaves(sc)
	b.a.Hidden = l.must(b.d.Structure.Hidden, "structure.hidden", TInt)
	b.a.Vocab = l.must(b.d.Structure.Vocab, "structure.vocab", TInt)
	return l.err
}

// leaves compiles a section's expression leaves, keeping the first error:
// a resolver compiles them all, then checks l.err once.
type leaves struct {
	b   *builder
	sc  *scope
	err error
}

func (b *builder) leaves(sc *scope) *leaves { return &leaves{b: b, sc: sc} }

// must compiles a leaf that is set (by the descriptor or a default).
func (l *leaves) must(f F[Expr], path string, t Type) *Value {
	if l.err != nil {
		return nil
	}
	var v *Value
	v, l.err = l.b.value(f, path, t, l.sc)
	return v
}

// opt compiles a leaf that may be unset (nil).
func (l *leaves) opt(f F[Expr], path string, t Type) *Value {
	if l.err != nil {
		return nil
	}
	var v *Value
	v, l.err = l.b.optValue(f, path, t, l.sc)
	return v
}

// mustLayer is must for a value that may read i, the layer's index: a
// module's hyperparameter made in the layer loop.
func (l *leaves) mustLayer(f F[Expr], path string, t Type) *Value {
	if l.err != nil {
		return nil
	}
	pl := *l.sc
	pl.perLayer = true
	var v *Value
	v, l.err = l.b.value(f, path, t, &pl)
	return v
}

// perLayer compiles a per-layer bool (it reads i, the layer's index); nil
// when unset.
func (l *leaves) perLayer(f F[Expr], path string) *Value {
	if l.err != nil || !f.IsSet() {
		return nil
	}
	pl := *l.sc
	pl.perLayer = true
	var v *Value
	v, l.err = l.b.value(f, path, TBool, &pl)
	return v
}

// uniqueFields: the Go fields each generated type gets from the
// checkpoint's names are distinct.
func (b *builder) uniqueFields() error {
	a := b.a
	byType := map[goType][]*field{
		tModel: {a.Embed.Field, a.Block.Stack, a.Head.Norm, a.Head.LMHead},
		tLayer: {},
	}
	if !a.Attn.Absent {
		byType[tLayer] = append(byType[tLayer], a.Attn.Field)
	}
	if !a.MLP.Absent {
		byType[tLayer] = append(byType[tLayer], a.MLP.Field)
	}
	for _, s := range a.Block.Slots {
		byType[tLayer] = append(byType[tLayer], s.Field)
	}
	for _, p := range a.Attn.Projs {
		byType[tAttention] = append(byType[tAttention], p.Field)
	}
	if a.Attn.QNorm != nil {
		byType[tAttention] = append(byType[tAttention], a.Attn.QNorm, a.Attn.KNorm)
	}
	for _, p := range a.MLP.Projs {
		byType[tMLP] = append(byType[tMLP], p.Field)
	}
	for _, fields := range byType {
		seen := map[string]string{}
		for _, f := range fields {
			if prev, dup := seen[f.name]; dup {
				this, _, _ := strings.Cut(f.doc, ";")
				return errAt(Pos{File: b.d.file, Line: b.d.Weights.Names.Pos.Line}, "weights.names",
					"%s and %s are both %s in Go, in one module", prev, this, f.name)
			}
			seen[f.name], _, _ = strings.Cut(f.doc, ";")
		}
	}
	return nil
}

func (b *builder) key(name string) *Key {
	for _, k := range b.a.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// readsUnder tells whether some config key reads a place under the
// config key root (root.x...: its fallback or prefer paths).
func (b *builder) readsUnder(root string) bool {
	for _, k := range b.a.Keys {
		for _, p := range append(slices.Clone(k.Fallback), k.Prefer...) {
			if strings.HasPrefix(p, root+".") {
				return true
			}
		}
	}
	return false
}

func (b *builder) checks() error {
	sc := b.scope("check")
	for _, e := range b.d.Config.Checks.Entries {
		path := "config.checks." + e.Key
		c := e.Val
		if !c.Expr.IsSet() || !c.Key.IsSet() || !c.Message.IsSet() {
			return errAt(e.Pos, path, "needs expr, key and message")
		}
		v, err := b.value(c.Expr, path+".expr", TBool, sc)
		if err != nil {
			return err
		}
		if _, ok := b.types[c.Key.V]; !ok {
			return errAt(c.Key.Pos, path+".key", "unknown name %q", c.Key.V)
		}
		b.a.Checks = append(b.a.Checks, &Check{Name: e.Key, Expr: v, Key: c.Key.V, Message: c.Message.V})
	}
	return nil
}

func (b *builder) drops() error {
	sc := b.scope("load")
	for i, r := range b.d.Weights.Drop.Items {
		path := fmt.Sprintf("weights.drop[%d]", i)
		set := 0
		for _, x := range []bool{r.Name.IsSet(), r.Contains.IsSet(), r.Layer.IsSet()} {
			if x {
				set++
			}
		}
		if set != 1 {
			return errAt(r.Pos, path, "needs exactly one of name, contains and layer")
		}
		d := Drop{Name: r.Name.V, Contains: r.Contains.V}
		if r.Layer.IsSet() {
			v, err := b.value(r.Layer, path+".layer", TInt, sc)
			if err != nil {
				return err
			}
			d.Layer = v
		}
		if r.When.IsSet() {
			v, err := b.value(r.When, path+".when", TBool, sc)
			if err != nil {
				return err
			}
			d.When = v
		}
		b.a.Drops = append(b.a.Drops, d)
	}
	return nil
}

// GGUF is the descriptor's gguf section, resolved.
type GGUF struct {
	Arch, Class string
	// Requires: a metadata key (within the architecture's namespace) a
	// file must hold, non-zero (or, as "key == N", equal to N), to be
	// this descriptor's; it tells apart descriptors that share a GGUF
	// architecture name.
	Requires string
	// Aliases are other general.architecture names whose files this
	// descriptor reads the same way (a vision-language model's text).
	Aliases       []string
	PermuteQK     bool
	QKVByHead     bool
	AlwaysHeadDim bool
	NormShift     float64
	// RopeFraction is the config key that rope.dimension_count over
	// head_dim is (the rotated fraction of each head).
	RopeFraction string
	// ExtraLayers is the metadata key counting the trailing blocks the
	// checkpoint does not run (multi-token prediction).
	ExtraLayers string
	// WidthKey is set to hidden_size / num_attention_heads on files of
	// WidthLayers layers.
	WidthKey    string
	WidthLayers []int
	// SlidingKey is the config key the file's sliding-window pattern
	// becomes, in SlidingForm (letters or types).
	SlidingKey, SlidingForm string
	// KVKey, KVAttention, KVOther: the config key a per-layer key/value
	// head count becomes, and its words for layers with and without
	// attention.
	KVKey, KVAttention, KVOther string
	// KVFFN, KVExperts: the words of layers without heads whose
	// feed-forward width is not 0, without and with a router; KVLetters:
	// the words joined into one string.
	KVFFN, KVExperts string
	KVLetters        bool
	// FinalNorm: llama.cpp's name of the final norm, where it is not
	// output_norm.
	FinalNorm string
	// RopeScaling: the config key the file's rope scaling map goes under,
	// where it is not rope_scaling.
	RopeScaling string
	// YarnLogTenth: the file's rope.scaling.yarn_log_multiplier is a
	// tenth of mscale_all_dim, and mscale equals mscale_all_dim.
	YarnLogTenth bool
	// NoAttention: the file's head and feed-forward counts are 0 (a
	// state-space model's), and not read.
	NoAttention bool
	// Flatten: llama.cpp's names of tensors the checkpoint holds 1-D and
	// the file with more axes.
	Flatten []string
	// Join: checkpoint modules (within a layer) whose weights are other
	// mapped modules' rows one after another (a projection llama.cpp's
	// converter split).
	Join []Entry[F[[]string]]
	// Split: mapped modules whose rows, in equal parts, are the listed
	// modules' (a projection the converter fused).
	Split []Entry[F[[]string]]
	// SplitGroups: config keys counting the groups a split module's rows
	// come in, each holding every part's rows in turn.
	SplitGroups []Entry[F[string]]
	// JoinGroups: config keys counting the groups a joined module's rows
	// come in, each holding every part's rows in turn.
	JoinGroups []Entry[F[string]]
	// AliasConfig: config values by the alias a file names, set after
	// Config.
	AliasConfig map[string]map[string]any
	// Lacking: config keys true where a layer holds the first tensor
	// named and not the second.
	Lacking []Entry[F[[]string]]
	// WindowRope: the config key (rope_parameters) the file's two ropes
	// go under, the full-attention layers' proportional one (rope_freqs)
	// and the sliding layers'.
	WindowRope string
	// KVWindow: the config key the full-attention layers' key/value head
	// count is, where the file holds a count a layer.
	KVWindow string
	// DoubleWidth: the config key true where some layers' feed-forward
	// width (a width a layer) is twice the others'.
	DoubleWidth string
	// Enums: metadata keys whose numbers become words of a config key:
	// key -> {config key, number -> word}.
	Enums map[string]Enum
	// SparseLayers: the config key (a bool a layer) true on the layers
	// after leading_dense_block_count.
	SparseLayers string
	// UnreadCount, UnreadTensors: the config key counting the last layers
	// whose tensors of these names (llama.cpp's) the model does not run.
	UnreadCount   string
	UnreadTensors []string
	// Computed: config keys that are a sum, difference, product or exact
	// quotient of two metadata keys (within the architecture's namespace).
	Computed []Entry[F[string]]
	Config   []Entry[Raw]
	Keys     []Entry[F[string]]
	// Copy: config keys that take another config key's value (one
	// metadata key read into two config keys).
	Copy []Entry[F[string]]
	// StoredAs: llama.cpp's tensor names whose values the file holds
	// transformed (negative_exp: -exp(x)); TrailingAxis: those the
	// checkpoint holds with a trailing unit axis the file drops.
	StoredAs     []Entry[F[string]]
	TrailingAxis []string
	// Flags: config keys that are true exactly when a layer holds the
	// tensor named (llama.cpp's name within a block, with its suffix).
	Flags []Entry[F[string]]
	// LayerValues: metadata keys (whole) holding a number a layer, each
	// made the tensor named (within the layer) of that layer.
	LayerValues []Entry[F[string]]
	Tensors     []Entry[F[string]]
}

// Enum is a gguf.enums entry: the config key and the word of each number.
type Enum struct {
	Key   string
	Words map[int]string
}

// ggufReaderKeys are the config keys gguf.Read writes from every file
// (its standard metadata, the tokenizer's ids, the head's presence),
// which gguf.copy may take values from.
var ggufReaderKeys = []string{"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
	"max_position_embeddings", "num_key_value_heads", "head_dim", "rope_theta", "rms_norm_eps", "vocab_size",
	"tie_word_embeddings", "bos_token_id", "eos_token_id"}

// ggufFlagTensor is llama.cpp's name of a tensor within a layer.
var ggufFlagTensor = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*\.(weight|bias)$`)

// ggufTensor is llama.cpp's name of a module of a layer, or of one tensor
// of it (attn_sinks.weight: mapped whole, to a checkpoint name without a
// suffix).
var ggufTensor = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

// ggufKey is a metadata key within the architecture's namespace
// (attention.scale for ARCH.attention.scale).
var ggufKey = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

// ggufRequires is gguf.requires: a metadata key, or a key and the whole
// number it must equal.
var ggufRequires = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*( == -?[0-9]+)?$`)

// ggufComputed is a gguf.computed value: two metadata keys (the second
// may be taken as its square root, sqrt(key)) and the operation between
// them.
var ggufComputed = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)* [-+*/] ([a-z0-9_]+(\.[a-z0-9_]+)*|sqrt\([a-z0-9_]+(\.[a-z0-9_]+)*\))$`)

func (b *builder) gguf() error {
	g := b.d.GGUF
	set := g.Arch.Set || g.Class.Set || g.PermuteQK.Set || g.AlwaysHeadDim.Set || g.Config.Set || g.Keys.Set || g.Tensors.Set
	if !set {
		return nil
	}
	pos := g.Pos
	if pos.File == "" {
		pos = Pos{File: b.d.file}
	}
	if !g.Arch.IsSet() || g.Arch.V == "" {
		return errAt(pos, "gguf.arch", "missing (required): the file's general.architecture")
	}
	if !g.Class.IsSet() || g.Class.V == "" {
		return errAt(pos, "gguf.class", "missing (required): config.json's architectures entry")
	}
	if len(g.Tensors.Entries) == 0 {
		return errAt(pos, "gguf.tensors", "missing (required): llama.cpp's names of a layer's tensors")
	}
	for _, e := range g.Tensors.Entries {
		path := "gguf.tensors." + e.Key
		if !ggufTensor.MatchString(e.Key) {
			return errAt(e.Pos, path, "%q is not a llama.cpp tensor name (words of lower-case letters, digits and _ joined by dots; ending .weight or .bias to map one tensor whole)", e.Key)
		}
		if e.Null || !checkpointName.MatchString(e.Val.V) {
			return errAt(e.Pos, path, "want a checkpoint name within the layer, got %q", e.Val.V)
		}
	}
	for _, e := range g.Keys.Entries {
		path := "gguf.keys." + e.Key
		if !ggufKey.MatchString(e.Key) {
			return errAt(e.Pos, path, "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots)", e.Key)
		}
		if e.Null || b.key(e.Val.V) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor, got %q", e.Val.V)
		}
	}
	if g.QKVByHead.V && !slices.ContainsFunc(g.Tensors.Entries, func(e Entry[F[string]]) bool { return e.Key == "attn_qkv" }) {
		return errAt(g.QKVByHead.Pos, "gguf.qkv_by_head", "needs the fused projection's tensor (attn_qkv) in gguf.tensors")
	}
	mapped := func(name string) bool {
		return slices.ContainsFunc(g.Tensors.Entries, func(e Entry[F[string]]) bool { return e.Key == name })
	}
	for _, e := range g.StoredAs.Entries {
		path := "gguf.stored_as." + e.Key
		if !mapped(e.Key) {
			return errAt(e.Pos, path, "want a tensor name of gguf.tensors")
		}
		if e.Null || e.Val.V != "negative_exp" {
			return errAt(e.Pos, path, "want negative_exp (the file holds -exp(x) of the checkpoint's x), got %q", e.Val.V)
		}
	}
	for _, e := range g.Split.Entries {
		path := "gguf.split." + e.Key
		if !slices.ContainsFunc(g.Tensors.Entries, func(t Entry[F[string]]) bool { return t.Val.V == e.Key }) {
			return errAt(e.Pos, path, "%q is not a checkpoint module gguf.tensors maps to", e.Key)
		}
		if e.Null || len(e.Val.V) < 2 || slices.ContainsFunc(e.Val.V, func(n string) bool { return !checkpointName.MatchString(n) }) {
			return errAt(e.Pos, path, "want two or more checkpoint module names within the layer, which its rows split into")
		}
	}
	for _, e := range g.SplitGroups.Entries {
		path := "gguf.split_groups." + e.Key
		if !slices.ContainsFunc(g.Split.Entries, func(x Entry[F[[]string]]) bool { return x.Key == e.Key }) {
			return errAt(e.Pos, path, "want a module of gguf.split")
		}
		if e.Null || b.key(e.Val.V) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor (the groups' count), got %q", e.Val.V)
		}
	}
	for _, e := range g.JoinGroups.Entries {
		path := "gguf.join_groups." + e.Key
		if !slices.ContainsFunc(g.Join.Entries, func(x Entry[F[[]string]]) bool { return x.Key == e.Key }) {
			return errAt(e.Pos, path, "want a module of gguf.join")
		}
		if e.Null || b.key(e.Val.V) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor (the groups' count), got %q", e.Val.V)
		}
	}
	enums := map[string]Enum{}
	for _, e := range g.Enums.Entries {
		path := "gguf.enums." + e.Key
		if !ggufKey.MatchString(e.Key) {
			return errAt(e.Pos, path, "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots)", e.Key)
		}
		if b.key(e.Val.Key.V) == nil {
			return errAt(e.Pos, path+".key", "want a config key of the descriptor, got %q", e.Val.Key.V)
		}
		words := map[int]string{}
		for _, w := range e.Val.Words.Entries {
			n, err := strconv.Atoi(w.Key)
			if err != nil || w.Null || w.Val.V == "" {
				return errAt(w.Pos, path+".words", "want whole numbers and the words they are, got %q: %q", w.Key, w.Val.V)
			}
			words[n] = w.Val.V
		}
		if len(words) == 0 {
			return errAt(e.Pos, path+".words", "want whole numbers and the words they are")
		}
		enums[e.Key] = Enum{Key: e.Val.Key.V, Words: words}
	}
	aliasConfig := map[string]map[string]any{}
	for _, e := range g.AliasConfig.Entries {
		path := "gguf.alias_config." + e.Key
		if !slices.Contains(g.Aliases.V, e.Key) {
			return errAt(e.Pos, path, "want one of gguf.aliases")
		}
		m, ok := e.Val.V.(map[string]any)
		if !ok || len(m) == 0 {
			return errAt(e.Pos, path, "want config keys and their values (numbers, strings, true/false)")
		}
		for k, v := range m {
			switch v.(type) {
			case bool, int64, float64, string:
			default:
				return errAt(e.Pos, path+"."+k, "want a number, a string or true/false")
			}
			if b.key(k) == nil {
				return errAt(e.Pos, path+"."+k, "want a config key of the descriptor")
			}
		}
		aliasConfig[e.Key] = m
	}
	for _, e := range g.Lacking.Entries {
		path := "gguf.lacking." + e.Key
		if b.key(e.Key) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor")
		}
		if e.Null || len(e.Val.V) != 2 || !ggufFlagTensor.MatchString(e.Val.V[0]) || !ggufFlagTensor.MatchString(e.Val.V[1]) {
			return errAt(e.Pos, path, "want two of llama.cpp's tensor names within a layer ([attn_k.weight, attn_v.weight]: true where a layer holds the first and not the second)")
		}
	}
	for _, k := range []struct {
		f    F[string]
		name string
	}{{g.KVWindow, "kv_window"}, {g.DoubleWidth, "double_width"}, {g.SparseLayers, "sparse_layers"}} {
		if k.f.Set && b.key(k.f.V) == nil {
			return errAt(k.f.Pos, "gguf."+k.name, "want a config key of the descriptor, got %q", k.f.V)
		}
	}
	if g.WindowRope.Set && !b.readsUnder(g.WindowRope.V) {
		return errAt(g.WindowRope.Pos, "gguf.window_rope", "want a config key whose full_attention and sliding_attention entries the descriptor reads (a key's fallback or prefer path under it), got %q", g.WindowRope.V)
	}
	if u := g.UnreadInLast; u.Count.Set || u.Tensors.Set {
		if b.key(u.Count.V) == nil {
			return errAt(u.Count.Pos, "gguf.unread_in_last.count", "want a config key of the descriptor, got %q", u.Count.V)
		}
		if len(u.Tensors.V) == 0 || slices.ContainsFunc(u.Tensors.V, func(n string) bool { return !mapped(n) }) {
			return errAt(u.Tensors.Pos, "gguf.unread_in_last.tensors", "want tensor names of gguf.tensors")
		}
	}
	if g.KVWindow.Set && !g.SlidingLayers.Key.Set {
		return errAt(g.KVWindow.Pos, "gguf.kv_window", "needs sliding_layers: which layers are full-attention ones")
	}
	for _, e := range g.Join.Entries {
		path := "gguf.join." + e.Key
		if !checkpointName.MatchString(e.Key) {
			return errAt(e.Pos, path, "want a checkpoint module name within the layer")
		}
		if e.Null || len(e.Val.V) < 2 {
			return errAt(e.Pos, path, "want two or more checkpoint modules that gguf.tensors maps to, whose rows it joins")
		}
		for _, part := range e.Val.V {
			if !slices.ContainsFunc(g.Tensors.Entries, func(t Entry[F[string]]) bool { return t.Val.V == part }) {
				return errAt(e.Pos, path, "%q is not a checkpoint module gguf.tensors maps to", part)
			}
		}
	}
	for _, n := range g.Flatten.V {
		if !mapped(n) {
			return errAt(g.Flatten.Pos, "gguf.flatten", "%q is not a tensor name of gguf.tensors", n)
		}
	}
	for _, n := range g.TrailingAxis.V {
		if !mapped(n) {
			return errAt(g.TrailingAxis.Pos, "gguf.trailing_axis", "%q is not a tensor name of gguf.tensors", n)
		}
	}
	for _, e := range g.Copy.Entries {
		path := "gguf.copy." + e.Key
		if b.key(e.Key) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor")
		}
		if e.Null || b.key(e.Val.V) == nil && !slices.Contains(ggufReaderKeys, e.Val.V) {
			return errAt(e.Pos, path, "want a config key of the descriptor, or one the reader writes (%s), to take the value of, got %q", strings.Join(ggufReaderKeys, ", "), e.Val.V)
		}
	}
	for _, e := range g.LayerValues.Entries {
		path := "gguf.layer_values." + e.Key
		if !ggufKey.MatchString(e.Key) {
			return errAt(e.Pos, path, "%q is not a GGUF metadata key (lower-case words joined by dots)", e.Key)
		}
		if e.Null || !checkpointName.MatchString(e.Val.V) {
			return errAt(e.Pos, path, "want a checkpoint name within the layer, got %q", e.Val.V)
		}
	}
	for _, e := range g.Flags.Entries {
		path := "gguf.flags." + e.Key
		if b.key(e.Key) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor")
		}
		if e.Null || !ggufFlagTensor.MatchString(e.Val.V) {
			return errAt(e.Pos, path, "want llama.cpp's name of a tensor within a layer (attn_q.bias), got %q", e.Val.V)
		}
	}
	for _, e := range g.Config.Entries {
		switch v := e.Val.V.(type) {
		case bool, int64, float64, string:
		case []any:
			for _, it := range v {
				switch it.(type) {
				case int64, float64:
				default:
					return errAt(e.Pos, "gguf.config."+e.Key, "want a number, a string, true/false or a list of numbers")
				}
			}
		default:
			return errAt(e.Pos, "gguf.config."+e.Key, "want a number, a string, true/false or a list of numbers")
		}
	}
	var widthLayers []int
	if w := g.WidthPerHead; w.Key.Set || w.Layers.Set {
		path := "gguf.width_per_head"
		if !w.Key.Set || b.key(w.Key.V) == nil {
			return errAt(w.Key.Pos, path+".key", "want a config key of the descriptor, got %q", w.Key.V)
		}
		list, ok := w.Layers.V.V.([]any)
		if !ok || len(list) == 0 {
			return errAt(w.Layers.Pos, path+".layers", "want a list of layer counts")
		}
		for _, it := range list {
			n, ok := it.(int64)
			if !ok || n < 1 {
				return errAt(w.Layers.Pos, path+".layers", "want a list of layer counts")
			}
			widthLayers = append(widthLayers, int(n))
		}
	}
	if r := g.SlidingLayers; r.Key.Set || r.Form.Set {
		if b.key(r.Key.V) == nil {
			return errAt(r.Key.Pos, "gguf.sliding_layers.key", "want a config key of the descriptor, got %q", r.Key.V)
		}
		if r.Form.V != "letters" && r.Form.V != "types" {
			return errAt(r.Form.Pos, "gguf.sliding_layers.form", "want letters or types, got %q", r.Form.V)
		}
	}
	if r := g.KVLayers; r.Key.Set || r.Attention.Set || r.Other.Set {
		if b.key(r.Key.V) == nil {
			return errAt(r.Key.Pos, "gguf.kv_layers.key", "want a config key of the descriptor, got %q", r.Key.V)
		}
		if r.Attention.V == "" || r.Other.V == "" || r.Attention.V == r.Other.V {
			return errAt(r.Key.Pos, "gguf.kv_layers", "want two different words: attention (layers with key/value heads) and other")
		}
		words := []string{r.Attention.V, r.Other.V}
		for _, w := range []F[string]{r.FFN, r.Experts} {
			if w.Set && (w.V == "" || slices.Contains(words, w.V)) {
				return errAt(w.Pos, "gguf.kv_layers", "want a word of its own for each kind of layer, got %q twice", w.V)
			}
			words = append(words, w.V)
		}
		if r.Experts.Set && !r.FFN.Set {
			return errAt(r.Experts.Pos, "gguf.kv_layers.experts", "needs ffn: the word of feed-forward layers without a router")
		}
		if r.Form.Set && r.Form.V != "letters" && r.Form.V != "words" {
			return errAt(r.Form.Pos, "gguf.kv_layers.form", "want letters or words, got %q", r.Form.V)
		}
		if r.Form.V == "letters" {
			for _, w := range words {
				if len([]rune(w)) != 1 {
					return errAt(r.Form.Pos, "gguf.kv_layers.form", "letters: each word must be one letter, got %q", w)
				}
			}
		}
	}
	if g.RopeScaling.Set && b.key(g.RopeScaling.V) == nil {
		return errAt(g.RopeScaling.Pos, "gguf.rope_scaling", "want a config key of the descriptor, got %q", g.RopeScaling.V)
	}
	if g.FinalNorm.Set && !ggufTensor.MatchString(g.FinalNorm.V) {
		return errAt(g.FinalNorm.Pos, "gguf.final_norm", "%q is not a llama.cpp tensor name", g.FinalNorm.V)
	}
	if g.ExtraLayers.Set && !ggufKey.MatchString(g.ExtraLayers.V) {
		return errAt(g.ExtraLayers.Pos, "gguf.extra_layers", "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots)", g.ExtraLayers.V)
	}
	if g.RopeFraction.Set && b.key(g.RopeFraction.V) == nil {
		return errAt(g.RopeFraction.Pos, "gguf.rope_fraction", "want a config key of the descriptor, got %q", g.RopeFraction.V)
	}
	if g.Requires.Set && !ggufRequires.MatchString(g.Requires.V) {
		return errAt(g.Requires.Pos, "gguf.requires", "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots), alone or as \"key == N\" (a whole number)", g.Requires.V)
	}
	for _, e := range g.Computed.Entries {
		path := "gguf.computed." + e.Key
		if b.key(e.Key) == nil {
			return errAt(e.Pos, path, "want a config key of the descriptor")
		}
		if e.Null || !ggufComputed.MatchString(e.Val.V) {
			return errAt(e.Pos, path, "want two GGUF metadata keys within the architecture's and an operation between them, spaced (\"attention.key_length - rope.dimension_count\"; + - * /; the second may be sqrt(key)), got %q", e.Val.V)
		}
	}
	b.a.GGUF = &GGUF{Arch: g.Arch.V, Class: g.Class.V, Requires: g.Requires.V, Aliases: g.Aliases.V, PermuteQK: g.PermuteQK.V, QKVByHead: g.QKVByHead.V, AlwaysHeadDim: g.AlwaysHeadDim.V, NormShift: g.NormShift.V, RopeFraction: g.RopeFraction.V, ExtraLayers: g.ExtraLayers.V,
		WidthKey: g.WidthPerHead.Key.V, WidthLayers: widthLayers,
		SlidingKey: g.SlidingLayers.Key.V, SlidingForm: g.SlidingLayers.Form.V,
		KVKey: g.KVLayers.Key.V, KVAttention: g.KVLayers.Attention.V, KVOther: g.KVLayers.Other.V, KVFFN: g.KVLayers.FFN.V, KVExperts: g.KVLayers.Experts.V, KVLetters: g.KVLayers.Form.V == "letters", FinalNorm: g.FinalNorm.V, RopeScaling: g.RopeScaling.V,
		YarnLogTenth: g.YarnLogTenth.V, NoAttention: g.NoAttention.V, Flatten: g.Flatten.V, Join: g.Join.Entries, Split: g.Split.Entries, SplitGroups: g.SplitGroups.Entries, JoinGroups: g.JoinGroups.Entries, AliasConfig: aliasConfig, Enums: enums, Lacking: g.Lacking.Entries,
		WindowRope: g.WindowRope.V, KVWindow: g.KVWindow.V, DoubleWidth: g.DoubleWidth.V, SparseLayers: g.SparseLayers.V,
		UnreadCount: g.UnreadInLast.Count.V, UnreadTensors: g.UnreadInLast.Tensors.V, Computed: g.Computed.Entries,
		Config: g.Config.Entries, Keys: g.Keys.Entries, Copy: g.Copy.Entries, StoredAs: g.StoredAs.Entries, TrailingAxis: g.TrailingAxis.V, Flags: g.Flags.Entries, LayerValues: g.LayerValues.Entries, Tensors: g.Tensors.Entries}
	return nil
}

func (b *builder) testConfig() error {
	om := b.d.TestConfig
	if len(om.Entries) == 0 {
		return errAt(Pos{File: b.d.file, Line: 1}, "test_config", "missing (required): a small config.json for the forward tests")
	}
	b.a.TestConfig = map[string]any{"model_type": b.a.Name}
	for _, e := range om.Entries {
		b.a.TestConfig[e.Key] = e.Val.V
	}
	return nil
}

// ropeDefault is a rope_scaling key's default, as JSON.
type ropeDefault string

// literalValue checks a default literal against its type and converts it
// to the Go value generated code spells.
func literalValue(v any, t Type) (any, error) {
	bad := func() error { return fmt.Errorf("%v is not a %s", v, t) }
	switch t {
	case TInt:
		if i, ok := v.(int64); ok {
			return int(i), nil
		}
	case TFloat:
		switch x := v.(type) {
		case int64:
			return float64(x), nil
		case float64:
			return x, nil
		}
	case TBool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case TString:
		if s, ok := v.(string); ok {
			return s, nil
		}
	case TInts, TFloats, TStrings, TBools:
		items, ok := v.([]any)
		if !ok {
			return nil, bad()
		}
		var out []any
		for _, it := range items {
			x, err := literalValue(it, t.elem())
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	case TRope:
		// an object, kept as its JSON text, which the config parser reads
		// as it reads the config's own
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			return nil, fmt.Errorf("a rope_scaling key's default is an object of its settings, not %v", v)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("a rope_scaling default: %v", err)
		}
		return ropeDefault(b), nil
	}
	return nil, bad()
}

// ---- names ----

// initialisms are spelled in capitals in Go names.
var initialisms = map[string]string{"mlp": "MLP", "lm": "LM", "qkv": "QKV", "rms": "RMS", "id": "ID",
	"kv": "KV", "fc": "FC", "qk": "QK", "nope": "NoPE", "url": "URL"}

// goName is a snake_case name in Go's CamelCase: self_attn -> SelfAttn,
// lm_head -> LMHead.
func goName(s string) string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if up, ok := initialisms[part]; ok {
			b.WriteString(up)
			continue
		}
		r := []rune(part)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String()
}

// ---- what emitters ask ----

// Pkg is the Go package name.
func (a *Arch) Pkg() string { return strings.NewReplacer("-", "_", ".", "_").Replace(a.Name) }

// Dir is the output directory, relative to the root.
func (a *Arch) Dir() string { return "generated/" + a.Pkg() }

// path is a checkpoint name under the decoder stack's prefix.
func (a *Arch) path(name string) string {
	if a.Names.Model == "" {
		return name
	}
	return a.Names.Model + "." + name
}

// Derivations are the keys derived when absent and the derived values, in
// the order they are computed.
func (a *Arch) Derivations() []string { return a.derivationOrder }

// DerivedKeys are the keys computed from others when a config lacks them.
func (a *Arch) DerivedKeys() []string {
	var out []string
	for _, k := range a.Keys {
		if k.Mode == "derive" {
			out = append(out, k.Name)
		}
	}
	return out
}

// KeyByName finds a key.
func (a *Arch) KeyByName(name string) *Key {
	for _, k := range a.Keys {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// DerivedByName finds a derived value.
func (a *Arch) DerivedByName(name string) *Derived {
	for _, d := range a.Derived {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// FirstSentence is the doc's first sentence, for listings.
func (a *Arch) FirstSentence() string {
	doc := strings.Join(strings.Fields(a.Doc), " ")
	if i := strings.Index(doc, ". "); i >= 0 {
		return doc[:i+1]
	}
	return doc
}

// fmtFloat spells a float as the descriptor would.
func fmtFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprint(f)
}
