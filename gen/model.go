package gen

import (
	"fmt"
	"math"
	"regexp"
	"sort"
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
	Norm    *Norm
	Embed   *Embed
	Block   *Block
	Attn    *Attention
	Rope    *Rope
	MLP     *MLP
	Head    *Head
	Scalars Scalars
	Names   ResolvedNames
	Drops   []Drop
	GGUF    *GGUF // nil: no GGUF support

	derivationOrder []string
	values          []*Value // every expression, in the order compiled
}

// Key is one config.json key the architecture reads.
type Key struct {
	Name     string // as in config.json
	Field    string // Go field of Config
	Type     Type
	Mode     string // required, default, derive or optional
	Default  any    // Go value of the literal, for default
	Derive   *Value
	Fallback []string
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

// Float32 spells the value as a float32 (for kernels that take one).
func (v *Value) Float32() *jen.Statement { return jen.Float32().Call(v.Code()) }

// ResolvedNames are the checkpoint names by role.
type ResolvedNames struct {
	Model, Embed, Layers, Norm, LMHead, Attention, MLP string
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
	b := &builder{d: d, a: a, types: map[string]Type{}, min: map[string]float64{}, plain: map[string]bool{}, fields: map[string]string{}}
	steps := []func() error{b.keys, b.derived, b.keyExprs, b.structure, b.checks, b.drops, b.gguf, b.testConfig}
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
		k := &Key{Name: e.Key, Field: goName(e.Key), Type: ks.Type.V, Fallback: ks.Fallback.V, Doc: ks.Doc.V}
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

func (b *builder) structure() error {
	s := &b.d.Structure
	a := b.a
	sc := b.scope("load")
	var err error
	must := func(f F[Expr], path string, t Type) *Value {
		if err != nil {
			return nil
		}
		var v *Value
		v, err = b.value(f, path, t, sc)
		return v
	}
	opt := func(f F[Expr], path string, t Type) *Value {
		if err != nil {
			return nil
		}
		var v *Value
		v, err = b.optValue(f, path, t, sc)
		return v
	}
	perLayer := func(f F[Expr], path string) *Value {
		if err != nil || !f.IsSet() {
			return nil
		}
		pl := *sc
		pl.perLayer = true
		var v *Value
		v, err = b.value(f, path, TBool, &pl)
		return v
	}
	a.Hidden = must(s.Hidden, "structure.hidden", TInt)
	a.Vocab = must(s.Vocab, "structure.vocab", TInt)
	a.Norm = newNorm(s.Norm.Kind.V, must(s.Norm.Eps, "structure.norm.eps", TFloat))
	if err != nil {
		return err
	}
	if err := b.scalars(sc); err != nil {
		return err
	}
	at := &s.Attention
	a.Attn = &Attention{
		Heads:    must(at.Heads, "structure.attention.heads", TInt),
		KVHeads:  must(at.KVHeads, "structure.attention.kv_heads", TInt),
		HeadDim:  must(at.HeadDim, "structure.attention.head_dim", TInt),
		Scale:    must(at.Scale, "structure.attention.scale", TFloat),
		FusedQKV: at.FusedQKV.V,
		Float32:  at.Float32.V,
		BiasQ:    must(at.Bias.Q, "structure.attention.bias.q", TBool),
		BiasK:    must(at.Bias.K, "structure.attention.bias.k", TBool),
		BiasV:    must(at.Bias.V, "structure.attention.bias.v", TBool),
		BiasO:    must(at.Bias.O, "structure.attention.bias.o", TBool),
		QKNorm:   at.QKNorm.V,
	}
	if err == nil {
		err = b.qkNormWhen(sc)
	}
	sliding := perLayer(at.Sliding, "structure.attention.sliding")
	window := opt(at.Window, "structure.attention.window", TInt)
	if err != nil {
		return err
	}
	if a.Attn.FusedQKV && !(a.Attn.BiasQ.IsFalse() && a.Attn.BiasK.IsFalse() && a.Attn.BiasV.IsFalse()) {
		return errAt(at.FusedQKV.Pos, "structure.attention.fused_qkv", "a fused qkv projection has no q, k, v biases here")
	}
	if a.Attn.Float32 && a.Scalars.Get(AttnSoftcap) != nil {
		return errAt(at.Float32.Pos, "structure.attention.float32", "soft-capped attention is written out in the model's dtype; float32 does not apply")
	}
	if (sliding == nil) != (window == nil) {
		return errAt(at.Sliding.Pos, "structure.attention", "sliding and window go together")
	}
	a.Attn.Sliding = newSliding(sliding, window)
	r := &s.Rope
	a.Rope = &Rope{
		Kind:                 r.Kind.V,
		Dims:                 must(r.Dims, "structure.rope.dims", TInt),
		Base:                 must(r.Base, "structure.rope.base", TFloat),
		Traditional:          must(r.Traditional, "structure.rope.traditional", TBool),
		MaxPositions:         opt(r.MaxPositions, "structure.rope.max_positions", TInt),
		OriginalMaxPositions: opt(r.OriginalMaxPositions, "structure.rope.original_max_positions", TInt),
		Layers:               perLayer(r.Layers, "structure.rope.layers"),
	}
	if err != nil {
		return err
	}
	switch {
	case a.Rope.readsScaling():
		if !r.Scaling.IsSet() {
			return errAt(r.Kind.Pos, "structure.rope.scaling", "a %s rope needs the rope_scaling key's name", a.Rope.Kind)
		}
		k := b.key(strings.TrimSpace(r.Scaling.V.Text))
		if k == nil || k.Type != TRope {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "%q is not a config key of type rope_scaling", r.Scaling.V.Text)
		}
		a.Rope.Scaling = k
		if (a.Rope.Kind == "su" || a.Rope.Kind == "su_mscale") && (a.Rope.MaxPositions == nil || a.Rope.OriginalMaxPositions == nil) {
			return errAt(r.Kind.Pos, "structure.rope", "an su rope needs max_positions and original_max_positions")
		}
	default:
		if r.Scaling.IsSet() {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "a %s rope reads no rope_scaling", a.Rope.Kind)
		}
	}
	if !a.Rope.Rotates() && a.Rope.Layers != nil {
		return errAt(r.Layers.Pos, "structure.rope.layers", "there is no rope to turn off")
	}
	if err := b.slidingRope(sliding, sc); err != nil {
		return err
	}
	a.MLP = &MLP{
		Kind:   s.MLP.Kind.V,
		Hidden: must(s.MLP.Hidden, "structure.mlp.hidden", TInt),
		Bias:   must(s.MLP.Bias, "structure.mlp.bias", TBool),
	}
	a.Head = &Head{Tied: must(s.Head.Tied, "structure.head.tied", TBool), WhenMissing: s.Head.TiedWhenMissing.V,
		Bias: must(s.Head.Bias, "structure.head.bias", TBool)}
	if err != nil {
		return err
	}
	if a.Head.WhenMissing && !a.Head.Tied.IsFalse() {
		return errAt(s.Head.TiedWhenMissing.Pos, "structure.head.tied_when_missing", "the checkpoint decides whether the head is tied; structure.head.tied (%s) cannot too", s.Head.Tied.V.Text)
	}
	if err := b.checkAdded(); err != nil {
		return err
	}
	if a.MLP.Sparse, err = b.buildMoE(sc); err != nil {
		return err
	}
	if err := b.names(); err != nil {
		return err
	}
	a.Embed = &Embed{}
	a.Embed.link(a)
	a.Attn.link(a)
	a.Rope.link()
	a.MLP.link(a)
	a.Head.link(a)
	a.Block = &Block{Kind: s.Block.V, norm: a.Norm, attn: a.Attn, mlp: a.MLP, scales: &a.Scalars, Count: a.Layers,
		Path: a.path(a.Names.Layers), ClipResidual: s.ClipResidual.V}
	a.Block.Stack = newField(goName(a.Names.Layers), func() *jen.Statement { return jen.Index().Id("Layer") }, a.Block.Path+".N")
	n := &b.d.Weights.Names
	defaults := slotNames(s.Block.V)
	for slot := AttnIn; slot <= MLPOut; slot++ {
		f := slotName(n, slot)
		if defaults[slot] == "" {
			if f.IsSet() {
				return errAt(f.Pos, "weights.names."+slotKeys[slot], "a %s block has no such norm", s.Block.V)
			}
			continue
		}
		a.Block.Slots = append(a.Block.Slots, &NormSlot{Slot: slot, Name: f.V, Field: a.Norm.field(goName(f.V), f.V)})
	}
	if sl := a.Attn.Sliding; sl != nil {
		sl.stack, sl.count = a.Block.Stack, a.Layers
	}
	return b.uniqueFields()
}

// names resolves the checkpoint names by role.
func (b *builder) names() error {
	n := b.d.Weights.Names
	for _, x := range []struct {
		f    F[string]
		path string
	}{
		{n.Model, "model"}, {n.Embed, "embed"}, {n.Layers, "layers"}, {n.Norm, "norm"}, {n.LMHead, "lm_head"},
		{n.Attention, "attention"}, {n.MLP, "mlp"}, {n.Q, "q"}, {n.K, "k"}, {n.V, "v"}, {n.O, "o"}, {n.QKV, "qkv"},
		{n.QNorm, "q_norm"}, {n.KNorm, "k_norm"}, {n.Gate, "gate"}, {n.Up, "up"}, {n.Down, "down"},
		{n.GateUp, "gate_up"}, {n.FC, "fc"}, {n.Proj, "proj"},
		{n.AttnIn, "attn_in_norm"}, {n.AttnOut, "attn_out_norm"}, {n.MLPIn, "mlp_in_norm"}, {n.MLPOut, "mlp_out_norm"},
	} {
		if x.f.IsSet() && !(x.path == "model" && x.f.V == "") && !checkpointName.MatchString(x.f.V) {
			return errAt(x.f.Pos, "weights.names."+x.path, "%q is not a checkpoint name (dotted names of letters, digits and _)", x.f.V)
		}
	}
	b.a.Names = ResolvedNames{
		Model: n.Model.V, Embed: n.Embed.V, Layers: n.Layers.V, Norm: n.Norm.V, LMHead: n.LMHead.V,
		Attention: n.Attention.V, MLP: n.MLP.V,
		Q: n.Q.V, K: n.K.V, V: n.V.V, O: n.O.V, QKV: n.QKV.V, QNorm: n.QNorm.V, KNorm: n.KNorm.V,
		Gate: n.Gate.V, Up: n.Up.V, Down: n.Down.V, GateUp: n.GateUp.V, FC: n.FC.V, Proj: n.Proj.V,
		AttnIn: n.AttnIn.V, AttnOut: n.AttnOut.V, MLPIn: n.MLPIn.V, MLPOut: n.MLPOut.V,
	}
	return nil
}

// checkpointName is a module's name in a checkpoint: dotted names.
var checkpointName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// uniqueFields: the Go fields each generated type gets from the
// checkpoint's names are distinct.
func (b *builder) uniqueFields() error {
	a := b.a
	byType := [][]*field{
		{a.Embed.Field, a.Block.Stack, a.Head.Norm, a.Head.LMHead},
		{a.Attn.Field, a.MLP.Field},
		nil,
		nil,
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
	// file must hold, non-zero, to be this descriptor's; it tells apart
	// descriptors that share a GGUF architecture name.
	Requires string
	// Aliases are other general.architecture names whose files this
	// descriptor reads the same way (a vision-language model's text).
	Aliases       []string
	PermuteQK     bool
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
	Config                  []Entry[Raw]
	Keys                    []Entry[F[string]]
	// Flags: config keys that are true exactly when layer 0 holds the
	// tensor named (llama.cpp's name within blk.0, with its suffix).
	Flags []Entry[F[string]]
	// LayerValues: metadata keys (whole) holding a number a layer, each
	// made the tensor named (within the layer) of that layer.
	LayerValues []Entry[F[string]]
	Tensors     []Entry[F[string]]
}

// ggufFlagTensor is llama.cpp's name of a tensor within a layer.
var ggufFlagTensor = regexp.MustCompile(`^[a-z0-9_]+\.(weight|bias)$`)

// ggufTensor is llama.cpp's name of a module of a layer, or of one tensor
// of it (attn_sinks.weight: mapped whole, to a checkpoint name without a
// suffix).
var ggufTensor = regexp.MustCompile(`^[a-z0-9_]+(\.(weight|bias))?$`)

// ggufKey is a metadata key within the architecture's namespace
// (attention.scale for ARCH.attention.scale).
var ggufKey = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)*$`)

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
			return errAt(e.Pos, path, "%q is not a llama.cpp tensor name (lower-case letters, digits and _, with .weight or .bias to map one tensor whole)", e.Key)
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
				if _, ok := it.(int64); !ok {
					return errAt(e.Pos, "gguf.config."+e.Key, "want a number, a string, true/false or a list of integers")
				}
			}
		default:
			return errAt(e.Pos, "gguf.config."+e.Key, "want a number, a string, true/false or a list of integers")
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
	if g.ExtraLayers.Set && !ggufKey.MatchString(g.ExtraLayers.V) {
		return errAt(g.ExtraLayers.Pos, "gguf.extra_layers", "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots)", g.ExtraLayers.V)
	}
	if g.RopeFraction.Set && b.key(g.RopeFraction.V) == nil {
		return errAt(g.RopeFraction.Pos, "gguf.rope_fraction", "want a config key of the descriptor, got %q", g.RopeFraction.V)
	}
	if g.Requires.Set && !ggufKey.MatchString(g.Requires.V) {
		return errAt(g.Requires.Pos, "gguf.requires", "%q is not a GGUF metadata key within the architecture's (lower-case words joined by dots)", g.Requires.V)
	}
	b.a.GGUF = &GGUF{Arch: g.Arch.V, Class: g.Class.V, Requires: g.Requires.V, Aliases: g.Aliases.V, PermuteQK: g.PermuteQK.V, AlwaysHeadDim: g.AlwaysHeadDim.V, NormShift: g.NormShift.V, RopeFraction: g.RopeFraction.V, ExtraLayers: g.ExtraLayers.V,
		WidthKey: g.WidthPerHead.Key.V, WidthLayers: widthLayers,
		SlidingKey: g.SlidingLayers.Key.V, SlidingForm: g.SlidingLayers.Form.V,
		Config: g.Config.Entries, Keys: g.Keys.Entries, Flags: g.Flags.Entries, LayerValues: g.LayerValues.Entries, Tensors: g.Tensors.Entries}
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
		return nil, fmt.Errorf("a rope_scaling key has no default; make it optional")
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
