package gen

import (
	"strings"

	"github.com/dave/jennifer/jen"
)

// The rope: how positions enter attention. build makes it once from the
// config (nn.RopeSpec); each layer's Attention holds it, or nn.NoRope on
// the layers that rotate nothing.

// RopeKind is how positions enter attention.
type RopeKind string

// ropeKinds are the rope kinds and the runtime's constant for each (""
// for none).
var ropeKinds = []struct {
	kind    RopeKind
	nnConst string
	scaled  bool // reads the rope_scaling key
}{
	{"none", "", false},
	{"plain", "RopePlain", false},
	{"scaled", "RopeScaled", true},
	{"su", "RopeSu", true},
	{"su_mscale", "RopeSuMscale", true},
}

func (RopeKind) values() []string {
	var out []string
	for _, k := range ropeKinds {
		out = append(out, string(k.kind))
	}
	return out
}

// Rope is the rotary embedding, resolved.
type Rope struct {
	none
	Kind                 RopeKind
	Dims, Base           *Value
	Traditional          *Value
	Scaling              *Key // the rope_scaling key; nil for plain ropes
	MaxPositions         *Value
	OriginalMaxPositions *Value
	Layers               *Value // per-layer bool; nil: every layer rotates
	Negate               bool   // rotates the other way
	// Unscaled are the rope types read as an unscaled rope.
	Unscaled []string
	// Sliding is the rope of the layers that attend within a window, where
	// it differs; nil: one rope for all.
	Sliding *SlidingRope

	field *field // Attention's rope
}

// SlidingRope is the rope of the sliding layers: its kind, base and dims
// replace the rope's (traditional and, for a scaling kind, the scaling key
// stay).
type SlidingRope struct {
	Kind       RopeKind
	Base, Dims *Value
	Scaling    *Key   // its own rope_scaling key; nil: the rope's
	Layers     *Value // which layers attend within a window (attention.sliding)
}

// variant is the rope of the sliding layers as a Rope of its own.
func (r *Rope) variant() *Rope {
	v := *r
	v.Kind, v.Base, v.Dims, v.Sliding = r.Sliding.Kind, r.Sliding.Base, r.Sliding.Dims, nil
	if r.Sliding.Scaling != nil {
		v.Scaling = r.Sliding.Scaling
	}
	return &v
}

func (r *Rope) row() (nnConst string, scaled bool) {
	for _, k := range ropeKinds {
		if k.kind == r.Kind {
			return k.nnConst, k.scaled
		}
	}
	return "", false
}

// Rotates reports whether attention rotates positions at all.
func (r *Rope) Rotates() bool { c, _ := r.row(); return c != "" }

// readsScaling reports whether the kind reads a rope_scaling key.
func (r *Rope) readsScaling() bool { _, s := r.row(); return s }

// KindConst is the runtime's constant of the kind.
func (r *Rope) KindConst() jen.Code { c, _ := r.row(); return jen.Qual(nnPkg, c) }

func (r *Rope) link() {
	doc := "the rope of this layer"
	if r.Sliding != nil {
		doc += " (the sliding layers' where " + r.Sliding.Layers.Text + ")"
	}
	if r.Layers != nil {
		doc += " (nn.NoRope where " + r.Layers.Text + " is false)"
	}
	r.field = newField("rope", func() *jen.Statement { return jen.Qual(nnPkg, "Rope") }, doc)
}

func (r *Rope) params(t goType) []jen.Code {
	if t != tAttention || !r.Rotates() {
		return nil
	}
	return []jen.Code{r.field.decl()}
}

func (r *Rope) inits(t goType) []kvPair {
	if t != tAttention || !r.Rotates() {
		return nil
	}
	var rope jen.Code = jen.Id("rope")
	if r.Sliding != nil {
		rope = jen.Qual(nnPkg, "RopeIf").Call(r.Sliding.Layers.Code(), jen.Id("slidingRope"), jen.Id("rope"))
	}
	if r.Layers != nil {
		rope = jen.Qual(nnPkg, "RopeOrNone").Call(r.Layers.Code(), rope)
	}
	return []kvPair{{r.field.key(), rope}}
}

// build makes the rope once, before the layers:
//
//	rope := w.Rope(nn.RopeSpec{Kind: nn.RopeScaled, Dims: ..., Scaling: c.RopeScaling, ...})
//
// and the sliding layers' as slidingRope, when they have their own.
func (r *Rope) build(s stage) []jen.Code {
	if s != sBefore || !r.Rotates() {
		return nil
	}
	out := []jen.Code{jen.Id("rope").Op(":=").Id("w").Dot("Rope").Call(r.spec())}
	if r.Sliding != nil {
		out = append(out, jen.Id("slidingRope").Op(":=").Id("w").Dot("Rope").Call(r.variant().spec()))
	}
	return out
}

// spec spells the nn.RopeSpec of the rope.
func (r *Rope) spec() jen.Code {
	spec := []kvPair{
		{"Kind", r.KindConst()},
		{"Dims", r.Dims.Code()},
		{"Base", r.Base.Code()},
		{"Traditional", r.Traditional.Code()},
	}
	if r.Scaling != nil && r.readsScaling() {
		spec = append(spec, kvPair{"Scaling", jen.Id("c").Dot(r.Scaling.Field)})
	}
	if r.MaxPositions != nil {
		spec = append(spec, kvPair{"MaxPositions", r.MaxPositions.Code()})
	}
	if r.OriginalMaxPositions != nil {
		spec = append(spec, kvPair{"OriginalMaxPositions", r.OriginalMaxPositions.Code()})
	}
	if r.Negate {
		spec = append(spec, kvPair{"Negate", jen.True()})
	}
	if len(r.Unscaled) > 0 && r.Scaling != nil && r.readsScaling() {
		var types []jen.Code
		for _, t := range r.Unscaled {
			types = append(types, jen.Lit(t))
		}
		spec = append(spec, kvPair{"Unscaled", jen.Index().String().Values(types...)})
	}
	return jen.Qual(nnPkg, "RopeSpec").Values(fieldsOf(spec)...)
}

// forward are its lines in Attention.forward, on q and k [B, heads, L,
// head_dim].
func (r *Rope) forward() []jen.Code {
	if !r.Rotates() {
		return nil
	}
	rope := r.field.of(rAttn)
	return []jen.Code{
		jen.Id("offset").Op(":=").Id("c").Dot("Offset").Call(),
		jen.List(jen.Id("q"), jen.Id("k")).Op("=").Qual(nnPkg, "RotateQK").Call(g(), rope, jen.Id("q"), jen.Id("k"), jen.Id("offset")),
	}
}

// doc is the rope's part of Attention.forward's comment.
func (r *Rope) doc() string {
	switch {
	case r.Rotates() && r.Layers != nil:
		return ", with rotary positions on the layers that have them"
	case r.Rotates() && r.Sliding != nil:
		return ", with rotary positions (the sliding layers' of their own)"
	case r.Rotates():
		return ", with rotary positions"
	}
	return ""
}

// slidingRope resolves structure.rope.sliding: the rope of the layers that
// attend within a window, where its kind, base, dims or scaling differ
// from the rest's.
func (b *builder) slidingRope(sliding *Value, sc *scope) error {
	d := &b.d.Structure.Rope.Sliding
	if !d.Kind.IsSet() && !d.Base.IsSet() && !d.Dims.IsSet() && !d.Scaling.IsSet() {
		return nil
	}
	at := d.Kind.Pos
	switch {
	case d.Kind.IsSet():
	case d.Base.IsSet():
		at = d.Base.Pos
	default:
		at = d.Dims.Pos
	}
	r := b.a.Rope
	switch {
	case sliding == nil:
		return errAt(at, "structure.rope.sliding", "there are no sliding layers (structure.attention.sliding) to give a rope of their own")
	case !r.Rotates():
		return errAt(at, "structure.rope.sliding", "a rope of kind none has no sliding variant")
	}
	v := &SlidingRope{Kind: r.Kind, Base: r.Base, Dims: r.Dims, Layers: sliding}
	if d.Kind.IsSet() {
		v.Kind = d.Kind.V
		probe := &Rope{Kind: v.Kind}
		switch {
		case !probe.Rotates():
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "none: layers without positions are structure.rope.layers")
		case probe.readsScaling() && r.Scaling == nil && !d.Scaling.IsSet():
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "a %s rope needs structure.rope.scaling, which the %s rope does not read", v.Kind, r.Kind)
		case v.Kind == "su", v.Kind == "su_mscale":
			return errAt(d.Kind.Pos, "structure.rope.sliding.kind", "an su rope is one architecture's whole rope, not a sliding variant")
		}
	}
	if d.Base.IsSet() {
		base, err := b.value(d.Base, "structure.rope.sliding.base", TFloat, sc)
		if err != nil {
			return err
		}
		v.Base = base
	}
	if d.Dims.IsSet() {
		dims, err := b.value(d.Dims, "structure.rope.sliding.dims", TInt, sc)
		if err != nil {
			return err
		}
		v.Dims = dims
	}
	if d.Scaling.IsSet() {
		if !(&Rope{Kind: v.Kind}).readsScaling() {
			return errAt(d.Scaling.Pos, "structure.rope.sliding.scaling", "a %s rope reads no rope_scaling", v.Kind)
		}
		k := b.key(strings.TrimSpace(d.Scaling.V.Text))
		if k == nil || k.Type != TRope {
			return errAt(d.Scaling.Pos, "structure.rope.sliding.scaling", "%q is not a config key of type rope_scaling", d.Scaling.V.Text)
		}
		v.Scaling = k
	}
	r.Sliding = v
	return nil
}

// resolveRope resolves structure.rope: its kind, dims, base, the
// rope_scaling key it reads, the layers it turns off in, and the sliding
// layers' own rope.
func (b *builder) resolveRope(sc *scope) error {
	r := &b.d.Structure.Rope
	l := b.leaves(sc)
	rope := &Rope{Kind: r.Kind.V}
	if rope.Kind == "none" {
		// no positions: its defaults (rope_theta, head_dim) are not read
		if r.Layers.IsSet() {
			return errAt(r.Layers.Pos, "structure.rope.layers", "there is no rope to turn off")
		}
		b.a.Rope = rope
		return nil
	}
	rope.Dims = l.must(r.Dims, "structure.rope.dims", TInt)
	rope.Base = l.must(r.Base, "structure.rope.base", TFloat)
	rope.Traditional = l.must(r.Traditional, "structure.rope.traditional", TBool)
	rope.MaxPositions = l.opt(r.MaxPositions, "structure.rope.max_positions", TInt)
	rope.OriginalMaxPositions = l.opt(r.OriginalMaxPositions, "structure.rope.original_max_positions", TInt)
	rope.Layers = l.perLayer(r.Layers, "structure.rope.layers")
	if l.err != nil {
		return l.err
	}
	if r.Negate.IsSet() && r.Negate.V {
		if rope.Kind != "plain" {
			return errAt(r.Negate.Pos, "structure.rope.negate", "a %s rope does not turn the other way; only a plain one does", rope.Kind)
		}
		rope.Negate = true
	}
	switch {
	case rope.readsScaling():
		if !r.Scaling.IsSet() {
			return errAt(r.Kind.Pos, "structure.rope.scaling", "a %s rope needs the rope_scaling key's name", rope.Kind)
		}
		k := b.key(strings.TrimSpace(r.Scaling.V.Text))
		if k == nil || k.Type != TRope {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "%q is not a config key of type rope_scaling", r.Scaling.V.Text)
		}
		rope.Scaling = k
		if (rope.Kind == "su" || rope.Kind == "su_mscale") && (rope.MaxPositions == nil || rope.OriginalMaxPositions == nil) {
			return errAt(r.Kind.Pos, "structure.rope", "an su rope needs max_positions and original_max_positions")
		}
	default:
		if r.Scaling.IsSet() {
			return errAt(r.Scaling.Pos, "structure.rope.scaling", "a %s rope reads no rope_scaling", rope.Kind)
		}
	}
	if r.Unscaled.IsSet() {
		if rope.Kind != "scaled" {
			return errAt(r.Unscaled.Pos, "structure.rope.unscaled", "only a scaled rope reads rope types, and so reads some as unscaled")
		}
		for _, t := range r.Unscaled.V {
			if strings.TrimSpace(t) == "" {
				return errAt(r.Unscaled.Pos, "structure.rope.unscaled", "an empty rope type")
			}
		}
		rope.Unscaled = r.Unscaled.V
	}
	if !rope.Rotates() && rope.Layers != nil {
		return errAt(r.Layers.Pos, "structure.rope.layers", "there is no rope to turn off")
	}
	b.a.Rope = rope
	var sliding *Value
	if sl := b.a.Attn.Sliding; sl != nil {
		sliding = sl.Layers
	}
	return b.slidingRope(sliding, sc)
}

// ropeDefaults: a plain rope over head_dim at the config's rope_theta.
func ropeDefaults(d *Descriptor) {
	r, f := &d.Structure.Rope, d.file
	setDefault(&r.Kind, RopeKind("plain"), f)
	exprDefault(&r.Dims, "head_dim", f)
	exprDefault(&r.Base, "rope_theta", f)
	exprDefault(&r.Traditional, "false", f)
}
