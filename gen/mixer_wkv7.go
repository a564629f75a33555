package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// The wkv7 mixer: RWKV-7's time mix. x and the previous token's x (a
// token shift) are mixed six ways; r, k and v are projections, the
// learning rate, the decay, the gate and the values' mix toward the first
// layer's values low-rank ones; each head's state [D, D] steps
// S = S diag(w) + (S a) bᵀ + v kᵀ and reads y = S r, normed per head, with
// a bonus of the current token, gated and projected back (nn.WKV7). The
// layer the first option names carries its values to the later layers
// (mlx.Graph.Carry). Its cache keeps the previous token's x and the state,
// and, where the feed-forward block shifts tokens too (mlp kind
// shifted_relu2), that block's previous x in a third slot, as mlx-lm's
// one cache a layer has them.

func init() {
	registerMixer(&mixerKind{
		name: "wkv7",
		options: []mixerOption{
			{key: "module", name: true, def: "attn"},
			{key: "head_dim", typ: TInt, def: "head_dim"},
			{key: "decay_rank", typ: TInt, def: "decay_low_rank_dim"},
			{key: "a_rank", typ: TInt, def: "a_low_rank_dim"},
			{key: "v_rank", typ: TInt, def: "v_low_rank_dim"},
			{key: "gate_rank", typ: TInt, def: "gate_low_rank_dim"},
			{key: "head_norm_eps", typ: TFloat, def: "6.4e-4"},
			{key: "first", perLayer: true, def: "i == 0"},
		},
		resolve: resolveWKV7,
	})
}

// WKV7Mixer is a wkv7 mixer, resolved.
type WKV7Mixer struct {
	none
	HeadDim, DecayRank, ARank, VRank, GateRank, Eps *Value
	// First is the per-layer bool of the layer whose values are carried.
	First *Value
	// ffSlot: the feed-forward block keeps its previous token in a third
	// slot of the layer's cache (mlpShifted).
	ffSlot bool

	name                       string
	self                       *field
	mixes                      []*field // x_r, x_w, x_k, x_v, x_a, x_g
	kk, ka, rk                 *field
	rProj, kProj, vProj, oProj Proj
	gNorm                      *field
	wLoRA, aLoRA, vLoRA, gLoRA *field
	mix                        *field // the runtime's parameters, wired at load
	carry                      *field // Model's key of the carried values
}

const rWKV7 = "t"

func resolveWKV7(o *mixerOptions, a *Arch) (mixer, error) {
	m := &WKV7Mixer{
		HeadDim: o.value("head_dim"), DecayRank: o.value("decay_rank"), ARank: o.value("a_rank"),
		VRank: o.value("v_rank"), GateRank: o.value("gate_rank"), Eps: o.value("head_norm_eps"),
		First: o.value("first"),
		name:  o.word("module"),
	}
	array := func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") }
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("WKV7") }, m.name)
	for _, n := range []string{"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"} {
		m.mixes = append(m.mixes, newField(goName(n), array, n))
	}
	m.kk = newField("KK", array, "k_k: k's scale before it is normed, [heads, head_dim]")
	m.ka = newField("KA", array, "k_a: the learning rate's share of k, [heads, head_dim]")
	m.rk = newField("RK", array, "r_k: the current token's bonus, [heads, head_dim]")
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	no := &Value{Text: "false", code: jen.False(), isLit: true, lit: false}
	proj := func(n string) Proj { return Proj{Field: linear(n), Name: n, Out: hidden, In: hidden, Bias: no} }
	m.rProj, m.kProj, m.vProj, m.oProj = proj("r_proj"), proj("k_proj"), proj("v_proj"), proj("o_proj")
	m.gNorm = newField("GNorm", nnType("HeadLayerNorm"), "g_norm: per head")
	lora := func(n, doc string) *field { return newField(goName(n), nnType("LoRA"), n+": "+doc) }
	m.wLoRA = lora("w_lora", "the decay's, tanh, biased")
	m.aLoRA = lora("a_lora", "the learning rate's, biased")
	m.vLoRA = lora("v_lora", "the values' mix toward the first layer's, biased; nil in the first layer")
	m.gLoRA = lora("g_lora", "the gate's, sigmoid, no bias")
	m.mix = newField("mix", nnType("WKV7"), "the time mix's parameters, wired at load")
	m.carry = newField("carry", func() *jen.Statement { return jen.Op("*").Qual(nnPkg, "Carry") }, "the key of the values the first wkv7 layer carries to the later ones")
	if a.MLP != nil && a.MLP.shifted() {
		m.ffSlot = true
	}
	return m, nil
}

func (m *WKV7Mixer) typeName() goType      { return "WKV7" }
func (m *WKV7Mixer) field() *field         { return m.self }
func (m *WKV7Mixer) recv() string          { return rWKV7 }
func (m *WKV7Mixer) typeDoc() string       { return "RWKV-7 time mix" }
func (m *WKV7Mixer) besideAttention() bool { return false }

func (m *WKV7Mixer) states() int {
	if m.ffSlot {
		return 3
	}
	return 2
}

// feedForwardSlots: the layer's cache has room for a shifted
// feed-forward block's previous token, in its last slot.
func (m *WKV7Mixer) feedForwardSlots() (int, bool) { return m.states(), m.ffSlot }

func (m *WKV7Mixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	var out []jen.Code
	for _, f := range m.mixes {
		out = append(out, f.decl())
	}
	out = append(out, m.kk.decl(), m.ka.decl(), m.rk.decl(),
		m.rProj.Field.decl(), m.kProj.Field.decl(), m.vProj.Field.decl(), m.oProj.Field.decl(),
		m.gNorm.decl(), m.wLoRA.decl(), m.aLoRA.decl(), m.vLoRA.decl(), m.gLoRA.decl())
	return out
}

func (m *WKV7Mixer) params(t goType) []jen.Code {
	switch t {
	case m.typeName():
		return []jen.Code{m.mix.decl()}
	case tModel:
		return []jen.Code{m.carry.decl()}
	}
	return nil
}

func (m *WKV7Mixer) inits(t goType) []kvPair {
	if t != tModel {
		return nil
	}
	return []kvPair{{m.carry.key(), jen.Op("&").Qual(nnPkg, "Carry").Values(jen.Id("Name").Op(":").Lit(m.name + ".v_first"))}}
}

// build loads its modules and wires the time mix, in the branch of the
// layers it mixes:
//
//	t.XR = lw.Reshaped("attn.x_r", 1, 1, m.hidden) // ... each mix
//	t.KK = lw.Reshaped("attn.k_k", m.hidden/c.HeadDim, c.HeadDim) // ... k_a, r_k
//	t.RProj = lw.Linear("attn.r_proj", m.hidden, m.hidden, false) // ... k, v, o
//	t.GNorm = lw.HeadLayerNorm("attn.g_norm", heads, c.HeadDim, 0.00064)
//	t.WLora = lw.LoRA("attn.w_lora", m.hidden, c.DecayLowRankDim, m.hidden, "tanh", true) // ... a, g
//	if !(i == 0) { t.VLora = lw.LoRA("attn.v_lora", ...) }
//	t.mix = &nn.WKV7{...}
func (m *WKV7Mixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	self := func(f *field) *jen.Statement { return f.of(rWKV7) }
	name := func(n string) jen.Code { return jen.Lit(m.name + "." + n) }
	hidden := fHidden.of(rModel)
	heads := func() *jen.Statement { return fHidden.of(rModel).Op("/").Parens(m.HeadDim.Code()) }
	var out []jen.Code
	for _, f := range m.mixes {
		out = append(out, self(f).Op("=").Id("lw").Dot("Reshaped").Call(name(f.doc), jen.Lit(1), jen.Lit(1), hidden.Clone()))
	}
	for i, f := range []*field{m.kk, m.ka, m.rk} {
		out = append(out, self(f).Op("=").Id("lw").Dot("Reshaped").Call(name([]string{"k_k", "k_a", "r_k"}[i]), heads(), m.HeadDim.Code()))
	}
	for _, p := range []Proj{m.rProj, m.kProj, m.vProj, m.oProj} {
		out = append(out, p.load(rWKV7, m.name))
	}
	lora := func(f *field, n string, rank *Value, act string, bias bool) *jen.Statement {
		return self(f).Op("=").Id("lw").Dot("LoRA").Call(name(n), hidden.Clone(), rank.Code(), hidden.Clone(), jen.Lit(act), jen.Lit(bias))
	}
	out = append(out,
		self(m.gNorm).Op("=").Id("lw").Dot("HeadLayerNorm").Call(name("g_norm"), heads(), m.HeadDim.Code(), m.Eps.Code()),
		lora(m.wLoRA, "w_lora", m.DecayRank, "tanh", true),
		lora(m.aLoRA, "a_lora", m.ARank, "none", true),
		lora(m.gLoRA, "g_lora", m.GateRank, "sigmoid", false),
		jen.Comment("the layer whose values are carried has no v_lora"),
		jen.If(jen.Op("!").Parens(m.First.Code())).Block(lora(m.vLoRA, "v_lora", m.VRank, "none", true)),
	)
	wired := []kvPair{
		{"Heads", heads()}, {"HeadDim", m.HeadDim.Code()},
	}
	for _, f := range m.mixes {
		wired = append(wired, kvPair{f.name, self(f)})
	}
	for _, f := range []*field{m.kk, m.ka, m.rk} {
		wired = append(wired, kvPair{f.name, self(f)})
	}
	for _, p := range []Proj{m.rProj, m.kProj, m.vProj, m.oProj} {
		wired = append(wired, kvPair{p.Field.name, self(p.Field)})
	}
	wired = append(wired,
		kvPair{"WLoRA", self(m.wLoRA)}, kvPair{"ALoRA", self(m.aLoRA)}, kvPair{"GLoRA", self(m.gLoRA)}, kvPair{"VLoRA", self(m.vLoRA)},
		kvPair{"GNorm", self(m.gNorm)},
		kvPair{"First", m.First.Code()}, kvPair{"Carry", m.carry.of(rModel)},
	)
	return append(out, self(m.mix).Op("=").Op("&").Qual(nnPkg, "WKV7").Values(fieldsOf(wired)...))
}

// emitForward writes WKV7.forward:
//
//	func (t *WKV7) forward(g, x, mask, c) *mlx.Array {
//		st := nn.StatesOf(g, c, 3)
//		y := t.mix.Apply(g, st, x)
//		st.Advance(x.Dim(1))
//		return y
//	}
func (m *WKV7Mixer) emitForward(f *jen.File) {
	slots := "slot 0: the previous token's x; 1: the state [B, heads, head_dim, head_dim]"
	if m.ffSlot {
		slots += "; 2: the feed-forward block's previous x"
	}
	body := []jen.Code{
		jen.Id("st").Op(":=").Qual(nnPkg, "StatesOf").Call(g(), jen.Id("c"), jen.Lit(m.states())).Comment(slots),
		jen.Id("y").Op(":=").Add(m.mix.of(rWKV7).Dot("Apply").Call(g(), jen.Id("st"), jen.Id("x"))),
		jen.Id("st").Dot("Advance").Call(jen.Id("x").Dot("Dim").Call(jen.Lit(1))),
		jen.Return(jen.Id("y")),
	}
	f.Comment(comment(fmt.Sprintf("forward is the RWKV-7 time mix over x [B, L, hidden]: the token shift, the WKV-7 recurrence a step at a time, reading and updating the layer's state cache (mask is the attention layers'; a recurrent layer runs one sequence a row and reads none); the layer %s carries its values to the later ones.", m.First.Text)))
	f.Func().Params(jen.Id(rWKV7).Op("*").Id("WKV7")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the heads would split with their states and the low-rank
// projections; no plan does that yet.
func (m *WKV7Mixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its wkv7 layers (%s) have no tensor-parallel plan: their heads, states and low-rank projections would split together", m.name)
}
