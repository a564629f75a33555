package gen

import "github.com/dave/jennifer/jen"

// The weightless q and k norms (qk_norm: per_head_unweighted): x / rms(x)
// over each head, with no checkpoint tensor, optionally turned on or off by
// the config (qk_norm_when) when the model loads.

// unweightedNorm is the field of a weightless q or k norm.
func unweightedNorm(goName string, when *Value) *field {
	doc := "x / rms(x) over each head, no weight"
	if when != nil {
		doc += "; applied where " + when.Text
	}
	return newField(goName, nnType("PlainRMSNorm"), doc)
}

// unweightedNormBuild makes the two norms in build.
func unweightedNormBuild(at *Attention) []jen.Code {
	on := jen.True()
	if at.QKNormWhen != nil {
		on = at.QKNormWhen.Code()
	}
	mk := func() jen.Code { return jen.Qual(nnPkg, "NewPlainRMSNorm").Call(at.norm.Eps.Code(), on.Clone()) }
	return []jen.Code{at.QNorm.of(rAttn).Op("=").Add(mk()), at.KNorm.of(rAttn).Op("=").Add(mk())}
}

// qkNormWhen resolves structure.attention.qk_norm_when.
func (b *builder) qkNormWhen(sc *scope) error {
	at := &b.d.Structure.Attention
	if !at.QKNormWhen.IsSet() {
		return nil
	}
	if at.QKNorm.V != "per_head_unweighted" {
		return nil // norms with weights: checkAddedAttention resolves it
	}
	v, err := b.value(at.QKNormWhen, "structure.attention.qk_norm_when", TBool, sc)
	if err != nil {
		return err
	}
	b.a.Attn.QKNormWhen = v
	return nil
}
