package gen

import "github.com/dave/jennifer/jen"

// The rope: how positions enter attention. build makes it once from the
// config (nn.RopeSpec); each layer's Attention holds it, or nn.NoRope on
// the layers that rotate nothing.

// RopeKindName is how positions enter attention.
type RopeKindName string

// ropeKinds are the rope kinds and the runtime's constant for each (""
// for none).
var ropeKinds = []struct {
	kind    RopeKindName
	nnConst string
	scaled  bool // reads the rope_scaling key
}{
	{"none", "", false},
	{"plain", "RopePlain", false},
	{"scaled", "RopeScaled", true},
	{"su", "RopeSu", true},
	{"su_mscale", "RopeSuMscale", true},
}

func (RopeKindName) values() []string {
	var out []string
	for _, k := range ropeKinds {
		out = append(out, string(k.kind))
	}
	return out
}

// Rope is the rotary embedding, resolved.
type Rope struct {
	none
	Kind                 RopeKindName
	Dims, Base           *Value
	Traditional          *Value
	Scaling              *Key // the rope_scaling key; nil for plain ropes
	MaxPositions         *Value
	OriginalMaxPositions *Value
	Layers               *Value // per-layer bool; nil: every layer rotates
	// Sliding is the rope of the layers that attend within a window, where
	// it differs; nil: one rope for all.
	Sliding *SlidingRope

	field *field // Attention's rope
}

// SlidingRope is the rope of the sliding layers: its kind and base replace
// the rope's (dims, traditional and, for a scaling kind, the scaling key
// stay).
type SlidingRope struct {
	Kind   RopeKindName
	Base   *Value
	Layers *Value // which layers attend within a window (attention.sliding)
}

// variant is the rope of the sliding layers as a Rope of its own.
func (r *Rope) variant() *Rope {
	v := *r
	v.Kind, v.Base, v.Sliding = r.Sliding.Kind, r.Sliding.Base, nil
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
