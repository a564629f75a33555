package gen

import (
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"
)

// The q and k norms (structure.attention.qk_norm): one table row per kind
// says where in the forward pass the norms apply, what module each is and
// how it loads, what it needs of the architecture's norm, and whether a
// shard plan can split it. Nothing else in gen compares qk_norm's value.

// QKNorm is the kind of the norms on queries and keys.
type QKNorm string

// qkPlace is where the q and k norms apply.
type qkPlace int

const (
	qkNowhere   qkPlace = iota
	qkPerHead           // over each head's head_dim, before the rope
	qkWide              // over [B, L, heads*head_dim], before the split into heads
	qkAfterRope         // over each head's head_dim, after the rope
)

// qkNormKind is one row of the table.
type qkNormKind struct {
	name  QKNorm
	place qkPlace
	// headLayout: the norms read [B, L, heads, head_dim] (or wider), so the
	// projections cannot go straight into [B, heads, L, head_dim].
	headLayout bool
	// module is the Go type of a norm field (nil: the architecture's norm).
	module func() *jen.Statement
	// doc comments a norm field of a module of its own.
	doc string
	// load spells build's lines for the two norms; nil for norms with no
	// weight, which newNorms makes in place.
	load func(at *Attention) []jen.Code
	// norms are the norm kinds it is defined over (nil: any).
	norms []NormKind
	// unsplit is why a shard plan cannot split the norms ("" when it can),
	// with the two norms' checkpoint paths as %s verbs.
	unsplit string
}

var qkNormKinds = []qkNormKind{
	{name: "none"},
	{name: "per_head", place: qkPerHead, load: func(at *Attention) []jen.Code {
		return at.loadNorms(at.headDim.of(rAttn), at.headDim.of(rAttn))
	}},
	{name: "full_width", place: qkWide, headLayout: true, load: func(at *Attention) []jen.Code {
		return at.loadNorms(at.heads.of(rAttn).Op("*").Add(at.headDim.of(rAttn)), at.kvHeads.of(rAttn).Op("*").Add(at.headDim.of(rAttn)))
	}, unsplit: "its %s and %s norms span the width of all heads, which no process holds"},
	{name: "per_head_after_rope", place: qkAfterRope, load: func(at *Attention) []jen.Code {
		return at.loadNorms(at.headDim.of(rAttn), at.headDim.of(rAttn))
	}},
	{name: "per_head_unweighted", place: qkPerHead, module: nnType("PlainRMSNorm"), doc: "x / rms(x) over each head, no weight"},
	{name: "per_head_unweighted_after_rope", place: qkAfterRope, module: nnType("PlainRMSNorm"), doc: "x / rms(x) over each head after the rope, no weight"},
	// each_head normalises each head over head_dim without affine
	// parameters (a LayerNorm's, or an RMSNorm's), then scales it by its
	// own weight [heads, head_dim].
	{name: "each_head", place: qkPerHead, headLayout: true, module: nnType("HeadNorm"), norms: []NormKind{"layer_norm", "rms"}, load: func(at *Attention) []jen.Code {
		qn, kn := at.Name+"."+at.qNormName, at.Name+"."+at.kNormName
		loader := "HeadNorm"
		if at.norm.Kind == "rms" {
			loader = "HeadRMSNorm"
		}
		return at.guardNorms([]jen.Code{
			at.QNorm.of(rAttn).Op("=").Id("lw").Dot(loader).Call(jen.Lit(qn), at.heads.of(rAttn), at.headDim.of(rAttn), at.norm.Eps.Code()),
			at.KNorm.of(rAttn).Op("=").Id("lw").Dot(loader).Call(jen.Lit(kn), at.kvHeads.of(rAttn), at.headDim.of(rAttn), at.norm.Eps.Code()),
		})
	}, unsplit: "its %s and %s norms hold a weight per head, which the plan does not split"},
}

func (QKNorm) values() []string {
	var out []string
	for _, k := range qkNormKinds {
		out = append(out, string(k.name))
	}
	return out
}

// qkNormKindOf is the table's row of a kind the decoder accepted.
func qkNormKindOf(name QKNorm) *qkNormKind {
	for i := range qkNormKinds {
		if qkNormKinds[i].name == name {
			return &qkNormKinds[i]
		}
	}
	return &qkNormKinds[0]
}

// linkNorms makes the two norm fields of an attention whose kind has any.
func (at *Attention) linkNorms(a *Arch) {
	k, n := at.qk, a.Names
	if k.place == qkNowhere {
		return
	}
	at.qNormName, at.kNormName = n.QNorm, n.KNorm
	mk := func(name string) *field {
		if k.module == nil {
			return a.Norm.field(goName(name), name)
		}
		doc := name
		if k.doc != "" {
			doc = k.doc
			if at.QKNormWhen != nil {
				doc += "; applied where " + at.QKNormWhen.Text
			}
		}
		return newField(goName(name), k.module, doc)
	}
	at.QNorm, at.KNorm = mk(n.QNorm), mk(n.KNorm)
}

// buildNorms are build's lines making the q and k norms.
func (at *Attention) buildNorms() []jen.Code {
	switch {
	case at.QNorm == nil:
		return nil
	case at.qk.load != nil:
		return at.qk.load(at)
	}
	// Norms without a weight, made in place and on where qk_norm_when holds.
	on := jen.True()
	if at.QKNormWhen != nil {
		on = at.QKNormWhen.Code()
	}
	mk := func() jen.Code { return jen.Qual(nnPkg, "NewPlainRMSNorm").Call(at.norm.Eps.Code(), on.Clone()) }
	return []jen.Code{at.QNorm.of(rAttn).Op("=").Add(mk()), at.KNorm.of(rAttn).Op("=").Add(mk())}
}

// loadNorms loads the q and k norms of the architecture's norm kind over q
// and k features.
func (at *Attention) loadNorms(q, k jen.Code) []jen.Code {
	qn, kn := at.Name+"."+at.qNormName, at.Name+"."+at.kNormName
	return at.guardNorms([]jen.Code{
		at.QNorm.of(rAttn).Op("=").Add(at.norm.load("lw", qn, q)),
		at.KNorm.of(rAttn).Op("=").Add(at.norm.load("lw", kn, k)),
	})
}

// guardNorms loads the norms only where qk_norm_when holds, if it is set.
func (at *Attention) guardNorms(loads []jen.Code) []jen.Code {
	if at.QKNormWhen == nil {
		return loads
	}
	return []jen.Code{jen.If(at.QKNormWhen.Code()).Block(loads...).Comment("otherwise nil norms, which leave q and k as they are")}
}

// resolveQKNorm resolves qk_norm and qk_norm_when.
func (b *builder) resolveQKNorm(sc *scope) error {
	at, a := &b.d.Structure.Attention, b.a
	a.Attn.qk = qkNormKindOf(at.QKNorm.V)
	if at.QKNormWhen.IsSet() {
		if a.Attn.qk.place == qkNowhere {
			return errAt(at.QKNormWhen.Pos, "structure.attention.qk_norm_when", "there are no q and k norms (qk_norm is none)")
		}
		v, err := b.value(at.QKNormWhen, "structure.attention.qk_norm_when", TBool, sc)
		if err != nil {
			return err
		}
		a.Attn.QKNormWhen = v
	}
	if ks := a.Attn.qk.norms; ks != nil && !slices.Contains(ks, a.Norm.Kind) {
		return errAt(at.QKNorm.Pos, "structure.attention.qk_norm", "%s norms are defined over %s norms; the norm kind is %s", at.QKNorm.V, joinKinds(ks), a.Norm.Kind)
	}
	if at.QKNormEps.IsSet() {
		if a.Attn.qk.place == qkNowhere {
			return errAt(at.QKNormEps.Pos, "structure.attention.qk_norm_eps", "there are no q and k norms (qk_norm is none)")
		}
		v, err := b.value(at.QKNormEps, "structure.attention.qk_norm_eps", TFloat, sc)
		if err != nil {
			return err
		}
		a.Attn.QKNormEps = v
	}
	return nil
}

// joinKinds lists norm kinds for a message: "layer_norm or rms".
func joinKinds(ks []NormKind) string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return strings.Join(s, " or ")
}
