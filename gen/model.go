package gen

import (
	"fmt"
	"math"
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
	Name    string // model_type
	File    string // descriptors/<name>.yaml
	Doc     string
	Tier    string
	Aliases []string
	Extends string // the base's model_type, "" when none

	Keys    []*Key
	Derived []*Derived
	Checks  []*Check
	Ignored []string
	// TestConfig is the descriptor's test_config: a small config.json.
	TestConfig map[string]any

	Layers, Hidden, Vocab *Value
	Block                 BlockKind
	Norm                  NormKind
	Eps                   *Value
	EmbedScale            *Value // nil: no scaling
	ResidualScale         *Value // nil: none
	Attn                  Attention
	Rope                  Rope
	MLP                   MLP
	Head                  Head
	Names                 ResolvedNames
	Drops                 []Drop

	derivationOrder []string
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
}

// Code spells the value in Go.
func (v *Value) Code() *jen.Statement { return v.code.Clone() }

// IsTrue and IsFalse tell a literal bool apart from a config-driven one.
func (v *Value) IsTrue() bool  { b, ok := v.lit.(bool); return v.isLit && ok && b }
func (v *Value) IsFalse() bool { b, ok := v.lit.(bool); return v.isLit && ok && !b }

// Float32 spells the value as a float32 (for kernels that take one).
func (v *Value) Float32() *jen.Statement { return jen.Float32().Call(v.Code()) }

// Attention is self-attention, resolved.
type Attention struct {
	Heads, KVHeads, HeadDim *Value
	Scale                   *Value
	FusedQKV                bool
	Float32                 bool // queries and keys in float32, the result cast back
	BiasQ, BiasK, BiasV     *Value
	BiasO                   *Value
	QKNorm                  QKNorm
	Softcap                 *Value // nil: MLX's fused attention
	Sliding                 *Value // per-layer bool; nil: every layer attends fully
	Window                  *Value
}

// Rope is the rotary embedding, resolved.
type Rope struct {
	Kind                 RopeKindName
	Dims, Base           *Value
	Traditional          *Value
	Scaling              *Key // the rope_scaling key; nil for plain ropes
	MaxPositions         *Value
	OriginalMaxPositions *Value
	Layers               *Value // per-layer bool; nil: every layer rotates
}

// MLP is the feed-forward block, resolved.
type MLP struct {
	Kind   MLPKind
	Hidden *Value
	Bias   *Value
}

// Head is the output projection, resolved.
type Head struct {
	Tied    *Value
	Divide  *Value
	Softcap *Value
}

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
	When           *Value // nil: always
}

// ---- building ----

type builder struct {
	d     *Descriptor
	a     *Arch
	types map[string]Type
	min   map[string]float64
	plain map[string]bool // keys read as such (not derived when absent)
}

func build(d *Descriptor) (*Arch, error) {
	a := &Arch{
		Name:    d.ModelType.V,
		File:    d.file,
		Doc:     strings.TrimSpace(d.Doc.V),
		Tier:    string(d.Tier.V),
		Aliases: d.Aliases.V,
		Extends: d.Extends.V,
	}
	if a.Doc == "" {
		return nil, errAt(Pos{File: d.file, Line: 1}, "doc", "missing (required): a paragraph on the architecture")
	}
	b := &builder{d: d, a: a, types: map[string]Type{}, min: map[string]float64{}, plain: map[string]bool{}}
	steps := []func() error{b.keys, b.derived, b.keyExprs, b.structure, b.checks, b.drops, b.testConfig}
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
	v := &Value{Text: f.V.Text, Type: want, Pos: pos, code: t.code, refs: t.refs}
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
	a.Block = s.Block.V
	a.Norm = s.Norm.Kind.V
	a.Eps = must(s.Norm.Eps, "structure.norm.eps", TFloat)
	a.EmbedScale = opt(s.EmbedScale, "structure.embed_scale", TFloat)
	a.ResidualScale = opt(s.ResidualScale, "structure.residual_scale", TFloat)
	at := &s.Attention
	a.Attn = Attention{
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
		Softcap:  opt(at.Softcap, "structure.attention.softcap", TFloat),
		Sliding:  perLayer(at.Sliding, "structure.attention.sliding"),
		Window:   opt(at.Window, "structure.attention.window", TInt),
	}
	if err != nil {
		return err
	}
	if a.Attn.FusedQKV && !(a.Attn.BiasQ.IsFalse() && a.Attn.BiasK.IsFalse() && a.Attn.BiasV.IsFalse()) {
		return errAt(at.FusedQKV.Pos, "structure.attention.fused_qkv", "a fused qkv projection has no q, k, v biases here")
	}
	if a.Attn.Float32 && a.Attn.Softcap != nil {
		return errAt(at.Float32.Pos, "structure.attention.float32", "soft-capped attention is written out in the model's dtype; float32 does not apply")
	}
	if (a.Attn.Sliding == nil) != (a.Attn.Window == nil) {
		return errAt(at.Sliding.Pos, "structure.attention", "sliding and window go together")
	}
	r := &s.Rope
	a.Rope = Rope{
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
	switch a.Rope.Kind {
	case "scaled", "su":
		if !r.Scaling.IsSet() {
			return errAt(r.Kind.Pos, "structure.rope.scaling", "a %s rope needs the rope_scaling key's name", a.Rope.Kind)
		}
		k := b.key(strings.TrimSpace(r.Scaling.V.Text))
		if k == nil || k.Type != TRope {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "%q is not a config key of type rope_scaling", r.Scaling.V.Text)
		}
		a.Rope.Scaling = k
		if a.Rope.Kind == "su" && (a.Rope.MaxPositions == nil || a.Rope.OriginalMaxPositions == nil) {
			return errAt(r.Kind.Pos, "structure.rope", "an su rope needs max_positions and original_max_positions")
		}
	default:
		if r.Scaling.IsSet() {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "a %s rope reads no rope_scaling", a.Rope.Kind)
		}
	}
	if a.Rope.Kind == "none" && a.Rope.Layers != nil {
		return errAt(r.Layers.Pos, "structure.rope.layers", "there is no rope to turn off")
	}
	a.MLP = MLP{
		Kind:   s.MLP.Kind.V,
		Hidden: must(s.MLP.Hidden, "structure.mlp.hidden", TInt),
		Bias:   must(s.MLP.Bias, "structure.mlp.bias", TBool),
	}
	a.Head = Head{
		Tied:    must(s.Head.Tied, "structure.head.tied", TBool),
		Divide:  opt(s.Head.Divide, "structure.head.divide", TFloat),
		Softcap: opt(s.Head.Softcap, "structure.head.softcap", TFloat),
	}
	if err != nil {
		return err
	}
	n := b.d.Weights.Names
	a.Names = ResolvedNames{
		Model: n.Model.V, Embed: n.Embed.V, Layers: n.Layers.V, Norm: n.Norm.V, LMHead: n.LMHead.V,
		Attention: n.Attention.V, MLP: n.MLP.V,
		Q: n.Q.V, K: n.K.V, V: n.V.V, O: n.O.V, QKV: n.QKV.V, QNorm: n.QNorm.V, KNorm: n.KNorm.V,
		Gate: n.Gate.V, Up: n.Up.V, Down: n.Down.V, GateUp: n.GateUp.V, FC: n.FC.V, Proj: n.Proj.V,
		AttnIn: n.AttnIn.V, AttnOut: n.AttnOut.V, MLPIn: n.MLPIn.V, MLPOut: n.MLPOut.V,
	}
	in, out, mIn, mOut := blockNormNames(a.Block)
	for _, x := range []struct {
		f    F[string]
		need string
		path string
	}{{n.AttnIn, in, "attn_in_norm"}, {n.AttnOut, out, "attn_out_norm"}, {n.MLPIn, mIn, "mlp_in_norm"}, {n.MLPOut, mOut, "mlp_out_norm"}} {
		if x.need == "" && x.f.IsSet() {
			return errAt(x.f.Pos, "weights.names."+x.path, "a %s block has no such norm", a.Block)
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
		if r.Name.IsSet() == r.Contains.IsSet() {
			return errAt(r.Pos, path, "needs exactly one of name and contains")
		}
		d := Drop{Name: r.Name.V, Contains: r.Contains.V}
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
	case TInts, TFloats, TStrings:
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

// Sliding reports whether some layers may attend within a window.
func (a *Arch) Sliding() bool { return a.Attn.Sliding != nil }

// HasRope reports whether attention rotates positions.
func (a *Arch) HasRope() bool { return a.Rope.Kind != "none" }

// MaskArray: manual (soft-capped) attention needs an explicit mask array,
// as mlx-lm's gemma2 asks for one.
func (a *Arch) MaskArray() bool { return a.Attn.Softcap != nil }

// path is a checkpoint name under the decoder stack's prefix.
func (a *Arch) path(name string) string {
	if a.Names.Model == "" {
		return name
	}
	return a.Names.Model + "." + name
}

// EmbedPath, NormPath and LayersPath are checkpoint names of the stack.
func (a *Arch) EmbedPath() string  { return a.path(a.Names.Embed) }
func (a *Arch) NormPath() string   { return a.path(a.Names.Norm) }
func (a *Arch) LayersPath() string { return a.path(a.Names.Layers) }

// Proj is one linear layer of a block: its Go field, checkpoint name
// (relative to the layer), and its shape as Go code.
type Proj struct {
	Field, Name string
	Out, In     *jen.Statement
	Bias        *Value
}

// m spells a field of the model receiver.
func m(name string) *jen.Statement { return jen.Id("m").Dot(name) }

// AttnProjs are the attention's linear layers.
func (a *Arch) AttnProjs() []Proj {
	n := a.Names
	qOut := m("heads").Op("*").Add(m("headDim"))
	kvOut := m("kvHeads").Op("*").Add(m("headDim"))
	hidden := func() *jen.Statement { return m("hidden") }
	o := Proj{Field: goName(n.O), Name: n.O, Out: hidden(), In: qOut.Clone(), Bias: a.Attn.BiasO}
	if a.Attn.FusedQKV {
		out := jen.Parens(m("heads").Op("+").Lit(2).Op("*").Add(m("kvHeads"))).Op("*").Add(m("headDim"))
		return []Proj{{Field: goName(n.QKV), Name: n.QKV, Out: out, In: hidden(), Bias: a.Attn.BiasQ}, o}
	}
	return []Proj{
		{Field: goName(n.Q), Name: n.Q, Out: qOut, In: hidden(), Bias: a.Attn.BiasQ},
		{Field: goName(n.K), Name: n.K, Out: kvOut, In: hidden(), Bias: a.Attn.BiasK},
		{Field: goName(n.V), Name: n.V, Out: kvOut.Clone(), In: hidden(), Bias: a.Attn.BiasV},
		o,
	}
}

// MLPProjs are the MLP's linear layers.
func (a *Arch) MLPProjs() []Proj {
	n := a.Names
	hidden, inner := func() *jen.Statement { return m("hidden") }, a.MLP.Hidden.Code
	bias := a.MLP.Bias
	switch a.MLP.Kind {
	case "fused_swiglu":
		return []Proj{
			{Field: goName(n.GateUp), Name: n.GateUp, Out: jen.Lit(2).Op("*").Add(inner()), In: hidden(), Bias: bias},
			{Field: goName(n.Down), Name: n.Down, Out: hidden(), In: inner(), Bias: bias},
		}
	case "relu2":
		return []Proj{
			{Field: goName(n.Up), Name: n.Up, Out: inner(), In: hidden(), Bias: bias},
			{Field: goName(n.Down), Name: n.Down, Out: hidden(), In: inner(), Bias: bias},
		}
	case "gelu":
		return []Proj{
			{Field: goName(n.FC), Name: n.FC, Out: inner(), In: hidden(), Bias: bias},
			{Field: goName(n.Proj), Name: n.Proj, Out: hidden(), In: inner(), Bias: bias},
		}
	}
	return []Proj{
		{Field: goName(n.Gate), Name: n.Gate, Out: inner(), In: hidden(), Bias: bias},
		{Field: goName(n.Up), Name: n.Up, Out: inner(), In: hidden(), Bias: bias},
		{Field: goName(n.Down), Name: n.Down, Out: hidden(), In: inner(), Bias: bias},
	}
}

// NormSlot is one of a layer's norms.
type NormSlot struct {
	Role  string // attn_in, attn_out, mlp_in, mlp_out
	Field string
	Name  string
}

// BlockNorms are the norms of a layer, in checkpoint order.
func (a *Arch) BlockNorms() []NormSlot {
	var out []NormSlot
	for _, s := range []struct{ role, name string }{
		{"attn_in", a.Names.AttnIn}, {"attn_out", a.Names.AttnOut}, {"mlp_in", a.Names.MLPIn}, {"mlp_out", a.Names.MLPOut},
	} {
		if s.name != "" {
			out = append(out, NormSlot{Role: s.role, Field: goName(s.name), Name: s.name})
		}
	}
	return out
}

// Norm returns the slot of a role, or nil.
func (a *Arch) normSlot(role string) *NormSlot {
	for _, s := range a.BlockNorms() {
		if s.Role == role {
			return &s
		}
	}
	return nil
}

// NormType is the nn type of every norm.
func (a *Arch) NormType() string {
	if a.Norm == "layer_norm" || a.Norm == "layer_norm_one_plus" {
		return "LayerNorm"
	}
	return "RMSNorm"
}

// NormLoader is the Weights method that loads a norm.
func (a *Arch) NormLoader() string {
	switch a.Norm {
	case "rms_one_plus":
		return "RMSNormOnePlus"
	case "layer_norm":
		return "LayerNorm"
	case "layer_norm_one_plus":
		return "LayerNormOnePlus"
	}
	return "RMSNorm"
}

// QKNormDims are the widths of the q and k norms.
func (a *Arch) QKNormDims() (q, k *jen.Statement) {
	if a.Attn.QKNorm == "full_width" {
		return m("heads").Op("*").Add(m("headDim")), m("kvHeads").Op("*").Add(m("headDim"))
	}
	return m("headDim"), m("headDim")
}

// RopeKindConst is the nn constant of the rope kind.
func (a *Arch) RopeKindConst() string {
	switch a.Rope.Kind {
	case "scaled":
		return "RopeScaled"
	case "su":
		return "RopeSu"
	}
	return "RopePlain"
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
