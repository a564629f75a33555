package gen

import "github.com/dave/jennifer/jen"

// structure.attention.kv_conv: keys and values pass a causal convolution
// over time before the rope (Baichuan-M1): each kv head's keys, and its
// values, become a weighted sum of the last kv_conv raw ones, a weight per
// head and tap (conv_k, conv_v under the attention, [1, 1, kv heads, 1,
// taps]). Each attention layer's cache is then a list of a two-slot state
// (the last raw keys and values) and its keys and values, as mlx-lm's
// CacheList of an ArraysCache and the attention cache.

// kvConv is the attention's convolution, resolved.
type kvConv struct {
	Taps  *Value
	field *field // Attention's *nn.KVConv
}

// resolveKVConv resolves structure.attention.kv_conv: a tap count, on an
// architecture whose every layer attends.
func (b *builder) resolveKVConv(sc *scope) error {
	at := &b.d.Structure.Attention
	if !at.KVConv.IsSet() {
		return nil
	}
	if len(b.d.Structure.Mixers.Entries) > 0 {
		return errAt(at.KVConv.Pos, "structure.attention.kv_conv", "a convolution of keys and values beside other token mixers (structure.mixers) is not supported")
	}
	taps, err := b.value(at.KVConv, "structure.attention.kv_conv", TInt, sc)
	if err != nil {
		return err
	}
	b.a.Attn.kvConv = &kvConv{Taps: taps, field: newField("KVConv", func() *jen.Statement { return jen.Op("*").Qual(nnPkg, "KVConv") }, "conv_k, conv_v: the keys' and values' convolution over time")}
	return nil
}

// load is its line in the layer's build:
//
//	a.KVConv = lw.KVConv("self_attn", a.kvHeads, taps)
func (k *kvConv) load(at *Attention) jen.Code {
	return k.field.of(rAttn).Op("=").Id("lw").Dot("KVConv").Call(jen.Lit(at.Name), at.kvHeads.of(rAttn), k.Taps.Code())
}

// caches are its lines after the layers: every layer's cache spec becomes
// a list of the convolution's state and the attention cache.
func (k *kvConv) caches() jen.Code {
	return jen.For(jen.Id("i").Op(":=").Range().Add(fCaches.of(rModel))).Block(
		fCaches.of(rModel).Index(jen.Id("i")).Op("=").Qual(nnPkg, "KVConvStates").Call(fCaches.of(rModel).Index(jen.Id("i"))),
	)
}

// forward is its line in Attention.forward, on k and v [B, kv_heads, L,
// head_dim] before the rope; c is the attention part of the layer's cache
// after it.
func (k *kvConv) forward() jen.Code {
	return jen.List(jen.Id("k"), jen.Id("v"), jen.Id("c")).Op("=").Qual(nnPkg, "KVConvolve").Call(g(), jen.Id("c"), k.field.of(rAttn), jen.Id("k"), jen.Id("v")).
		Comment("over time, from the state in c's first part; c is its attention part after")
}
