package gen

import "github.com/dave/jennifer/jen"

// Attention sinks (structure.attention.sinks): each query head has a
// learned logit, <attention>.sinks [heads] in the checkpoint, that joins
// every row of its softmax and takes a share of the probability without
// contributing a value. kv.AttentionSinks attends with them, over dense
// and quantized caches alike.

// checkSinks resolves structure.attention.sinks.
func (b *builder) checkSinks() error {
	at, a := &b.d.Structure.Attention, b.a
	if !at.Sinks.IsSet() || !at.Sinks.V {
		return nil
	}
	const path = "structure.attention.sinks"
	switch {
	case a.Scalars.Get(AttnSoftcap) != nil:
		return errAt(at.Sinks.Pos, path, "soft-capped attention is written out and takes no sinks")
	case a.Attn.Float32 || a.Attn.Float32IfHalf:
		return errAt(at.Sinks.Pos, path, "attention in float32 takes no sinks; set one of the two")
	}
	a.Attn.Sinks = newField("Sinks", func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }, "sinks: each head's sink logit [heads]")
	return nil
}

// loadSinks are build's lines loading the sinks.
func (at *Attention) loadSinks() []jen.Code {
	if at.Sinks == nil {
		return nil
	}
	return []jen.Code{at.Sinks.of(rAttn).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(at.Name+".sinks"), at.heads.of(rAttn))}
}
