package gen

import "github.com/dave/jennifer/jen"

// How attention turns queries and the cache's keys and values into its
// output: one runtime entry point, kv.Attend, with a kv.Spec per variant:
// MLX's fused attention by default, or one variant, each a row of the
// kinds here with the fields it sets and its doc. The variants exclude
// each other; attendConflicts holds every pair's error in one place.

// attendKind is one way to attend.
type attendKind struct {
	name string // its descriptor key under structure.attention
	// spec is the kv.Spec fields beyond Scale and Mask.
	spec func(at *Attention) []jen.Code
	doc  string // appended to Attention.forward's comment
}

// call spells kv.Attend on q and update (the cache's keys and values after
// this step's update).
func (k *attendKind) call(at *Attention, update jen.Code) *jen.Statement {
	fields := []jen.Code{specField("Scale", at.scale.of(rAttn)), specField("Mask", jen.Id("mask"))}
	if k.spec != nil {
		fields = append(fields, k.spec(at)...)
	}
	return jen.Qual(kvPkg, "Attend").Call(g(), jen.Id("q"), update, jen.Qual(kvPkg, "Spec").Values(fields...))
}

// specField spells one field of a kv.Spec literal.
func specField(name string, v jen.Code) jen.Code { return jen.Id(name).Op(":").Add(v) }

var (
	attendFused   = &attendKind{name: "fused"}
	attendFloat32 = &attendKind{name: "float32", spec: func(*Attention) []jen.Code {
		return []jen.Code{specField("Precision", jen.Qual(kvPkg, "Float32"))}
	}, doc: "; queries and keys attend in float32, and the result is cast back to the values' dtype"}
	attendFloat32IfFloat16 = &attendKind{name: "float32_if_float16", spec: func(*Attention) []jen.Code {
		return []jen.Code{specField("Precision", jen.Qual(kvPkg, "Float32AtFloat16"))}
	}, doc: "; at float16 queries and keys attend in float32, and the result is cast back"}
	// Sinks: each query head has a learned logit, <attention>.sinks [heads]
	// in the checkpoint, that joins every row of its softmax and takes a
	// share of the probability without contributing a value.
	attendSinks = &attendKind{name: "sinks", spec: func(at *Attention) []jen.Code {
		return []jen.Code{specField("Sinks", at.Sinks.of(rAttn))}
	}, doc: "; each head's learned sink logit joins its softmax"}
	// Soft-capped scores (structure.attention.softcap, a scalar) are
	// written out: tanh(s / c) * c before the softmax.
	attendSoftcap = &attendKind{name: "softcap", spec: func(at *Attention) []jen.Code {
		return []jen.Code{specField("Softcap", at.softcap.of(rAttn))}
	}, doc: "; scores are soft-capped, so attention is written out rather than fused"}
)

// attendConflicts are the variants that exclude each other: set is the one
// whose key the error points at, other the one already chosen.
var attendConflicts = []struct {
	set, other *attendKind
	msg        string
}{
	{attendFloat32, attendSoftcap, "soft-capped attention is written out in the model's dtype; float32 does not apply"},
	{attendFloat32IfFloat16, attendFloat32, "float32 already casts every dtype; set one of the two"},
	{attendFloat32IfFloat16, attendSoftcap, "soft-capped attention is written out in the model's dtype; float32 does not apply"},
	{attendSinks, attendSoftcap, "soft-capped attention is written out and takes no sinks"},
	{attendSinks, attendFloat32, "attention in float32 takes no sinks; set one of the two"},
	{attendSinks, attendFloat32IfFloat16, "attention in float32 takes no sinks; set one of the two"},
}

// resolveAttend picks the attend variant from structure.attention's float32,
// float32_if_float16 and sinks keys and the softcap scalar, in that order,
// refusing any two together.
func (b *builder) resolveAttend() error {
	at, a := &b.d.Structure.Attention, b.a
	a.Attn.attend = attendFused
	if a.Scalars.Get(AttnSoftcap) != nil {
		a.Attn.attend = attendSoftcap
	}
	for _, c := range []struct {
		kind *attendKind
		f    F[bool]
	}{{attendFloat32, at.Float32}, {attendFloat32IfFloat16, at.Float32IfFloat16}, {attendSinks, at.Sinks}} {
		if !c.f.IsSet() || !c.f.V {
			continue
		}
		for _, x := range attendConflicts {
			if x.set == c.kind && x.other == a.Attn.attend {
				return errAt(c.f.Pos, "structure.attention."+c.kind.name, "%s", x.msg)
			}
		}
		a.Attn.attend = c.kind
	}
	a.Attn.Float32 = a.Attn.attend == attendFloat32
	a.Attn.Float32IfFloat16 = a.Attn.attend == attendFloat32IfFloat16
	if a.Attn.attend == attendSinks {
		a.Attn.Sinks = newField("Sinks", func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, "sinks: each head's sink logit [heads]")
	}
	return nil
}

// loadSinks are build's lines loading the sinks.
func (at *Attention) loadSinks() []jen.Code {
	if at.Sinks == nil {
		return nil
	}
	return []jen.Code{at.Sinks.of(rAttn).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(at.Name+".sinks"), at.heads.of(rAttn))}
}
