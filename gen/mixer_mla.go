package gen

import (
	"github.com/dave/jennifer/jen"
)

// The mla mixer: multi-head latent attention (DeepSeek-V3's). Each token's
// keys and values are compressed into a normed latent of kv_rank values
// and one rotated key of rope values that every head shares
// (kv_a_proj_with_mqa, kv_a_layernorm); the layer's cache keeps those
// two, as one head's keys and values. The queries come from q_proj, or,
// where q_rank is above 0, from q_a_proj, an RMSNorm and q_b_proj; each
// head's nope part meets the latent through the head's key
// up-projection (embed_q) and its rope part the rotated key, and the
// head's output is the latent through its value up-projection
// (unembed_out), then o_proj. Checkpoints that store the two
// up-projections as one kv_b_proj are split at load. The attention
// itself is nn.LatentAttend's; the rope is the architecture's. The
// expanded form (form: expanded, mlx-lm's DeepSeek-V2) keeps kv_b_proj one
// linear layer, expands the latent into every head's keys and values and
// caches those (nn.ExpandedLatentAttend).

func init() {
	registerMixer(&mixerKind{
		name: "mla",
		options: []mixerOption{
			{key: "module", name: true, def: "self_attn"},
			{key: "heads", typ: TInt, def: "num_attention_heads"},
			{key: "q_rank", typ: TInt, def: "q_lora_rank"},
			{key: "kv_rank", typ: TInt, def: "kv_lora_rank"},
			{key: "nope", typ: TInt, def: "qk_nope_head_dim"},
			{key: "rope", typ: TInt, def: "qk_rope_head_dim"},
			{key: "value", typ: TInt, def: "v_head_dim"},
			{key: "scale", typ: TFloat, def: "(qk_nope_head_dim + qk_rope_head_dim) ** -0.5"},
			{key: "norm_eps", typ: TFloat, def: "1.0e-6"},
			{key: "bias", typ: TBool, def: "attention_bias"},
			{key: "form", words: []string{"latent", "expanded"}, def: "latent"},
		},
		resolve: resolveMLA,
	})
}

// MLAMixer is an mla mixer, resolved.
type MLAMixer struct {
	none
	Heads, QRank, KVRank, Nope, Rope, Value *Value
	Scale, Eps, Bias                        *Value

	// Expanded: the form of mlx-lm's DeepSeek-V2 and MiniCPM3: kv_b_proj
	// one linear layer, every head's keys and values cached.
	Expanded bool

	name                           string
	self                           *field // the Layer's *LatentAttention
	heads, rope                    *field
	qProj, qA, qB, kvA, kvB, oProj Proj
	qNorm, kvNorm, embed, unembed  *field
}

const rMLA = "a"

func resolveMLA(o *mixerOptions, a *Arch) (mixer, error) {
	if a.Rope == nil || !a.Rope.Rotates() {
		return nil, errAt(o.pos, o.path, "an mla mixer rotates the queries' and keys' rope parts with the architecture's rope: structure.rope must rotate")
	}
	m := &MLAMixer{
		Heads: o.value("heads"), QRank: o.value("q_rank"), KVRank: o.value("kv_rank"),
		Nope: o.value("nope"), Rope: o.value("rope"), Value: o.value("value"),
		Scale: o.value("scale"), Eps: o.value("norm_eps"), Bias: o.value("bias"),
		name:     o.word("module"),
		Expanded: o.word("form") == "expanded",
	}
	m.self = newField(goName(m.name), func() *jen.Statement { return jen.Op("*").Id("LatentAttention") }, m.name)
	m.heads = newField("heads", func() *jen.Statement { return jen.Qual(nnPkg, "LatentHeads") }, "")
	m.rope = newField("rope", func() *jen.Statement { return jen.Qual(nnPkg, "Rope") }, "the architecture's rope, on the rope parts")
	hidden := func() *jen.Statement { return fHidden.of(rModel) }
	heads := func(f string) func() *jen.Statement {
		return func() *jen.Statement { return m.heads.of(rMLA).Dot(f).Call() }
	}
	code := func(v *Value) func() *jen.Statement { return func() *jen.Statement { return jen.Add(v.Code()) } }
	no := &Value{Text: "false", code: jen.False(), isLit: true, lit: false}
	m.qProj = Proj{Field: linear("q_proj"), Name: "q_proj", Out: heads("QueryWidth"), In: hidden, Bias: no}
	m.qA = Proj{Field: linear("q_a_proj"), Name: "q_a_proj", Out: code(m.QRank), In: hidden, Bias: m.Bias}
	m.qB = Proj{Field: linear("q_b_proj"), Name: "q_b_proj", Out: heads("QueryWidth"), In: code(m.QRank), Bias: no}
	m.kvA = Proj{Field: linear("kv_a_proj_with_mqa"), Name: "kv_a_proj_with_mqa",
		Out: func() *jen.Statement { return jen.Add(m.KVRank.Code()).Op("+").Add(m.Rope.Code()) }, In: hidden, Bias: m.Bias}
	m.oProj = Proj{Field: linear("o_proj"), Name: "o_proj", Out: hidden, In: heads("OutputWidth"), Bias: m.Bias}
	m.kvB = Proj{Field: linear("kv_b_proj"), Name: "kv_b_proj", Out: func() *jen.Statement {
		return jen.Add(m.Heads.Code()).Op("*").Parens(jen.Add(m.Nope.Code()).Op("+").Add(m.Value.Code()))
	}, In: code(m.KVRank), Bias: no}
	m.qNorm = newField("QALayernorm", nnType("RMSNorm"), "q_a_layernorm (nil where the queries are not compressed)")
	m.kvNorm = newField("KvALayernorm", nnType("RMSNorm"), "kv_a_layernorm: the latent's norm")
	m.embed = newField("EmbedQ", nnType("MultiLinear"), "embed_q: each head's key up-projection [heads, kv_rank, nope]")
	m.unembed = newField("UnembedOut", nnType("MultiLinear"), "unembed_out: each head's value up-projection [heads, value, kv_rank]")
	return m, nil
}

func (m *MLAMixer) typeName() goType      { return "LatentAttention" }
func (m *MLAMixer) field() *field         { return m.self }
func (m *MLAMixer) recv() string          { return rMLA }
func (m *MLAMixer) typeDoc() string       { return "multi-head latent attention" }
func (m *MLAMixer) states() int           { return 0 }
func (m *MLAMixer) besideAttention() bool { return false }

// attends: its layers keep keys and values (the latent and the rotated
// key; in the expanded form, every head's) in attention caches and read
// the mask: as an array in the latent form, whose rotated part's scores
// take it (mlx-lm's return_array), as attention does in the expanded one.
func (m *MLAMixer) attends() bool        { return true }
func (m *MLAMixer) wantsMaskArray() bool { return !m.Expanded }

func (m *MLAMixer) fields(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	out := []jen.Code{m.qProj.Field.decl(), m.qA.Field.decl(), m.qNorm.decl(), m.qB.Field.decl(), m.kvA.Field.decl(), m.kvNorm.decl()}
	if m.Expanded {
		out = append(out, m.kvB.Field.decl())
	} else {
		out = append(out, m.embed.decl(), m.unembed.decl())
	}
	return append(out, m.oProj.Field.decl())
}

func (m *MLAMixer) params(t goType) []jen.Code {
	if t != m.typeName() {
		return nil
	}
	return []jen.Code{m.heads.decl(), m.rope.decl()}
}

func (m *MLAMixer) inits(t goType) []kvPair {
	if t != m.typeName() {
		return nil
	}
	heads := []kvPair{
		{"Heads", m.Heads.Code()},
		{"Rank", m.KVRank.Code()},
		{"Nope", m.Nope.Code()},
		{"Rope", m.Rope.Code()},
		{"Value", m.Value.Code()},
		{"Scale", jen.Float32().Call(m.Scale.Code())},
	}
	return []kvPair{{m.heads.key(), jen.Qual(nnPkg, "LatentHeads").Values(fieldsOf(heads)...)}, {m.rope.key(), jen.Id("rope")}}
}

// build loads its modules, in the branch of the layers it mixes:
//
//	if c.QLoraRank > 0 {
//		a.QAProj = lw.Linear("self_attn.q_a_proj", c.QLoraRank, m.hidden, c.AttentionBias)
//		a.QALayernorm = lw.RMSNorm("self_attn.q_a_layernorm", c.QLoraRank, 1e-6)
//		a.QBProj = lw.Linear("self_attn.q_b_proj", a.heads.QueryWidth(), c.QLoraRank, false)
//	} else {
//		a.QProj = lw.Linear("self_attn.q_proj", a.heads.QueryWidth(), m.hidden, false)
//	}
//	a.KvAProjWithMqa = ...; a.KvALayernorm = ...
//	lw.SplitLatentKV("self_attn.kv_b_proj", "self_attn.embed_q", "self_attn.unembed_out", ...)
//	a.EmbedQ = lw.MultiLinear(...); a.UnembedOut = ...; a.OProj = ...
func (m *MLAMixer) build(s stage) []jen.Code {
	if s != sLayer {
		return nil
	}
	self := func(f *field) *jen.Statement { return f.of(rMLA) }
	name := func(n string) jen.Code { return jen.Lit(joinName(m.name, n)) }
	compressed := []jen.Code{
		m.qA.load(rMLA, m.name),
		self(m.qNorm).Op("=").Id("lw").Dot("RMSNorm").Call(name("q_a_layernorm"), m.QRank.Code(), m.Eps.Code()),
		m.qB.load(rMLA, m.name),
	}
	var query jen.Code = jen.If(jen.Add(m.QRank.Code()).Op(">").Lit(0)).Block(compressed...).Else().Block(m.qProj.load(rMLA, m.name))
	out := []jen.Code{
		query,
		m.kvA.load(rMLA, m.name),
		self(m.kvNorm).Op("=").Id("lw").Dot("RMSNorm").Call(name("kv_a_layernorm"), m.KVRank.Code(), m.Eps.Code()),
	}
	if m.Expanded {
		return append(out, m.kvB.load(rMLA, m.name), m.oProj.load(rMLA, m.name))
	}
	return append(out,
		jen.Id("lw").Dot("SplitLatentKV").Call(name("kv_b_proj"), name("embed_q"), name("unembed_out"),
			m.Heads.Code(), m.Nope.Code(), m.Value.Code(), m.KVRank.Code()),
		self(m.embed).Op("=").Id("lw").Dot("MultiLinear").Call(name("embed_q"), m.Heads.Code(), m.KVRank.Code(), m.Nope.Code()),
		self(m.unembed).Op("=").Id("lw").Dot("MultiLinear").Call(name("unembed_out"), m.Heads.Code(), m.Value.Code(), m.KVRank.Code()),
		m.oProj.load(rMLA, m.name),
	)
}

// emitForward writes LatentAttention.forward:
//
//	func (a *LatentAttention) forward(g, x, mask, c) *mlx.Array {
//		q := nn.LatentQueries(g, x, a.QProj, a.QAProj, a.QALayernorm, a.QBProj)
//		o := nn.LatentAttend(g, a.heads, q, a.KvAProjWithMqa.Apply(g, x), a.KvALayernorm, a.EmbedQ, a.UnembedOut, a.rope, mask, c)
//		return a.OProj.Apply(g, o)
//	}
func (m *MLAMixer) emitForward(f *jen.File) {
	self := func(fl *field) *jen.Statement { return fl.of(rMLA) }
	attend := jen.Qual(nnPkg, "LatentAttend").Call(g(), self(m.heads), jen.Id("q"), apply(self(m.kvA.Field), jen.Id("x")),
		self(m.kvNorm), self(m.embed), self(m.unembed), self(m.rope), jen.Id("mask"), jen.Id("c"))
	doc := "forward is multi-head latent attention over x [B, L, hidden]: the queries, the latent and the rotated key of each token, attention over the layer's cache of latents and rotated keys (absorbed for one token, expanded for several), and the output projection."
	if m.Expanded {
		attend = jen.Qual(nnPkg, "ExpandedLatentAttend").Call(g(), self(m.heads), jen.Id("q"), apply(self(m.kvA.Field), jen.Id("x")),
			self(m.kvNorm), self(m.kvB.Field), self(m.rope), jen.Id("mask"), jen.Id("c"))
		doc = "forward is multi-head latent attention over x [B, L, hidden] in its expanded form: the queries, each token's latent expanded into every head's keys and values beside the shared rotated key, attention over the layer's cache of those, and the output projection."
	}
	body := []jen.Code{
		jen.Id("q").Op(":=").Qual(nnPkg, "LatentQueries").Call(g(), jen.Id("x"), self(m.qProj.Field), self(m.qA.Field), self(m.qNorm), self(m.qB.Field)).Comment("[B, L, heads x (nope + rope)]"),
		jen.Id("o").Op(":=").Add(attend).Comment("[B, L, heads x value]"),
		jen.Return(apply(self(m.oProj.Field), jen.Id("o"))),
	}
	f.Comment(comment(doc))
	f.Func().Params(jen.Id(rMLA).Op("*").Id("LatentAttention")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// shard: the heads would split across q_b_proj's rows, the up-projections'
// leading axis and o_proj's columns, the latent replicated; no plan does
// that yet.
func (m *MLAMixer) shard(p *ShardPlan, a *Arch) {
	p.refuse("its mla layers (%s) have no tensor-parallel plan: their heads would split across the query projection, the per-head up-projections and the output projection, with the latent kept whole", m.name)
}
