package gen

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/dave/jennifer/jen"
)

// genVersion is the version of runtime/mlx's API this generator writes
// code for; generated code refuses to build against a runtime outside
// mlx.MinGenVersion..mlx.MaxGenVersion.
const genVersion = 1

// emitModel writes model.go: the weight types, Load, Tensors, build,
// NewCaches, Info and Free.
//
//	type Model struct { EmbedTokens *nn.Embedding; Layers []Layer; ...; hidden, vocab int; ... }
//	type Layer struct { SelfAttn Attention; MLP MLP; InputLayernorm *nn.RMSNorm; ... }
//	type Attention struct { QProj *nn.Linear; ...; heads, kvHeads, headDim int; scale float32; rope nn.Rope }
//	func Load(dir string, opts nn.Options) (*Model, error)
//	func build(w *nn.Weights, c *Config) (*Model, error) // every tensor, by checkpoint name
func emitModel(a *Arch) ([]byte, error) {
	f := newFile(a.Pkg(), a.File)
	f.Comment("This package is generated for version " + fmt.Sprint(genVersion) + " of runtime/mlx's API; a runtime that")
	f.Comment("no longer offers it fails the build here.")
	f.Const().Defs(
		jen.Id("_").Op("=").Qual(mlxPkg, "EnforceVersion").Call(jen.Lit(genVersion).Op("-").Qual(mlxPkg, "MinGenVersion")),
		jen.Id("_").Op("=").Qual(mlxPkg, "EnforceVersion").Call(jen.Qual(mlxPkg, "MaxGenVersion").Op("-").Lit(genVersion)),
	)
	f.Line()
	f.Comment("Name is the model_type of this architecture.")
	f.Const().Id("Name").Op("=").Lit(a.Name)
	f.Line()
	f.Comment("Aliases are the other model_types that run on it (mlx-lm's MODEL_REMAPPING).")
	var al []jen.Code
	for _, x := range a.Aliases {
		al = append(al, jen.Lit(x))
	}
	f.Var().Id("Aliases").Op("=").Index().String().Values(al...)
	f.Line()
	f.Comment("Arch is this architecture as the registry lists it.")
	archFields := []kvPair{
		{"Name", jen.Id("Name")},
		{"Tier", jen.Lit(a.Tier)},
		{"Aliases", jen.Id("Aliases")},
		{"Doc", jen.Lit(a.FirstSentence())},
		{"Load", jen.Id("loadModel")},
		{"Tensors", jen.Id("Tensors")},
		{"Config", jen.Func().Params(jen.Id("data").Index().Byte()).Params(jen.Any(), jen.Error()).Block(jen.Return(jen.Id("ParseConfig").Call(jen.Id("data"))))},
		{"Derived", strList(a.DerivedKeys())},
		{"Ignored", jen.Id("IgnoredKeys")},
		shardFact(a),
	}
	if a.Encoder != nil {
		archFields = append(archFields, kvPair{"Encoder", jen.True()})
	}
	archFields = append(archFields, variantsFact(a)...)
	if a.GGUF != nil {
		archFields = append(archFields, kvPair{"GGUF", ggufFacts(a)})
	}
	if len(a.UnitRows) > 0 {
		var names []string
		for _, u := range a.UnitRows {
			names = append(names, u.Name)
		}
		archFields = append(archFields, kvPair{"UnitRows", strList(names)})
	}
	f.Var().Id("Arch").Op("=").Qual(nnPkg, "Arch").Values(fieldsOf(archFields)...)
	f.Line()
	emitTypes(f, a)
	emitLoad(f, a)
	emitBuild(f, a)
	emitAccessors(f, a)
	return render(f)
}

// ggufFacts spells the descriptor's gguf section as an *nn.GGUF:
//
//	&nn.GGUF{Arch: "llama", Class: "LlamaForCausalLM", Tensors: map[string]string{"attn_q": "self_attn.q_proj", ...}, ...}
func ggufFacts(a *Arch) jen.Code {
	g := a.GGUF
	cfg := jen.Dict{}
	for _, e := range g.Config {
		switch v := e.Val.V.(type) {
		case int64:
			cfg[jen.Lit(e.Key)] = jen.Lit(int(v))
		case []any:
			ints := !slices.ContainsFunc(v, func(it any) bool { _, ok := it.(int64); return !ok })
			items := make([]jen.Code, len(v))
			for i, it := range v {
				switch x := it.(type) {
				case int64:
					items[i] = jen.Lit(int(x))
					if !ints {
						items[i] = jen.Lit(float64(x))
					}
				case float64:
					// infinities as transformers tags them in config.json
					switch {
					case math.IsInf(x, 1):
						items[i] = jen.Map(jen.String()).Any().Values(jen.Dict{jen.Lit("__float__"): jen.Lit("Infinity")})
					case math.IsInf(x, -1):
						items[i] = jen.Map(jen.String()).Any().Values(jen.Dict{jen.Lit("__float__"): jen.Lit("-Infinity")})
					default:
						items[i] = jen.Lit(x)
					}
				}
			}
			if ints {
				cfg[jen.Lit(e.Key)] = jen.Index().Int().Values(items...)
			} else {
				cfg[jen.Lit(e.Key)] = jen.Index().Any().Values(items...)
			}
		default:
			cfg[jen.Lit(e.Key)] = jen.Lit(v)
		}
	}
	tensors := jen.Dict{}
	for _, e := range g.Tensors {
		tensors[jen.Lit(e.Key)] = jen.Lit(e.Val.V)
	}
	pairs := []kvPair{
		{"Arch", jen.Lit(g.Arch)},
		{"Class", jen.Lit(g.Class)},
		{"Requires", jen.Lit(g.Requires)},
		{"PermuteQK", jen.Lit(g.PermuteQK)},
		{"AlwaysHeadDim", jen.Lit(g.AlwaysHeadDim)},
		{"Config", jen.Map(jen.String()).Any().Values(cfg)},
	}
	if len(g.Aliases) > 0 {
		names := make([]jen.Code, len(g.Aliases))
		for i, n := range g.Aliases {
			names[i] = jen.Lit(n)
		}
		pairs = append(pairs, kvPair{"Aliases", jen.Index().String().Values(names...)})
	}
	if g.QKVByHead {
		pairs = append(pairs, kvPair{"QKVByHead", jen.Lit(true)})
	}
	if g.NormShift != 0 {
		pairs = append(pairs, kvPair{"NormShift", jen.Lit(g.NormShift)})
	}
	if g.SlidingKey != "" {
		pairs = append(pairs, kvPair{"SlidingKey", jen.Lit(g.SlidingKey)}, kvPair{"SlidingForm", jen.Lit(g.SlidingForm)})
	}
	if g.KVKey != "" {
		pairs = append(pairs, kvPair{"KVLayersKey", jen.Lit(g.KVKey)}, kvPair{"KVLayersWords", jen.Index(jen.Lit(2)).String().Values(jen.Lit(g.KVAttention), jen.Lit(g.KVOther))})
		if g.KVFFN != "" {
			pairs = append(pairs, kvPair{"KVLayersFFN", jen.Lit(g.KVFFN)})
		}
		if g.KVExperts != "" {
			pairs = append(pairs, kvPair{"KVLayersExperts", jen.Lit(g.KVExperts)})
		}
		if g.KVLetters {
			pairs = append(pairs, kvPair{"KVLayersLetters", jen.Lit(true)})
		}
	}
	if g.RopeScaling != "" {
		pairs = append(pairs, kvPair{"RopeScalingKey", jen.Lit(g.RopeScaling)})
	}
	if g.FinalNorm != "" {
		pairs = append(pairs, kvPair{"FinalNorm", jen.Lit(g.FinalNorm)})
	}
	if g.ExtraLayers != "" {
		pairs = append(pairs, kvPair{"ExtraLayers", jen.Lit(g.ExtraLayers)})
	}
	if g.RopeFraction != "" {
		pairs = append(pairs, kvPair{"RopeFraction", jen.Lit(g.RopeFraction)})
	}
	if g.WidthKey != "" {
		layers := make([]jen.Code, len(g.WidthLayers))
		for i, n := range g.WidthLayers {
			layers[i] = jen.Lit(n)
		}
		pairs = append(pairs, kvPair{"WidthKey", jen.Lit(g.WidthKey)}, kvPair{"WidthLayers", jen.Index().Int().Values(layers...)})
	}
	if len(g.Keys) > 0 {
		pairs = append(pairs, kvPair{"Keys", strMap(g.Keys)})
	}
	if len(g.Computed) > 0 {
		pairs = append(pairs, kvPair{"Computed", strMap(g.Computed)})
	}
	if g.NoAttention {
		pairs = append(pairs, kvPair{"NoAttention", jen.Lit(true)})
	}
	if len(g.Flatten) > 0 {
		pairs = append(pairs, kvPair{"Flatten", strList(g.Flatten)})
	}
	for _, m := range []struct {
		field   string
		entries []Entry[F[[]string]]
	}{{"Join", g.Join}, {"Split", g.Split}, {"Lacking", g.Lacking}} {
		if len(m.entries) > 0 {
			d := jen.Dict{}
			for _, e := range m.entries {
				d[jen.Lit(e.Key)] = strList(e.Val.V)
			}
			pairs = append(pairs, kvPair{m.field, jen.Map(jen.String()).Index().String().Values(d)})
		}
	}
	if len(g.Enums) > 0 {
		outer := jen.Dict{}
		for _, k := range slices.Sorted(maps.Keys(g.Enums)) {
			e := g.Enums[k]
			words := jen.Dict{}
			for n, w := range e.Words {
				words[jen.Lit(n)] = jen.Lit(w)
			}
			outer[jen.Lit(k)] = jen.Qual(nnPkg, "GGUFEnum").Values(jen.Dict{
				jen.Id("Key"):   jen.Lit(e.Key),
				jen.Id("Words"): jen.Map(jen.Int()).String().Values(words),
			})
		}
		pairs = append(pairs, kvPair{"Enums", jen.Map(jen.String()).Qual(nnPkg, "GGUFEnum").Values(outer)})
	}
	if len(g.SplitGroups) > 0 {
		pairs = append(pairs, kvPair{"SplitGroups", strMap(g.SplitGroups)})
	}
	if len(g.JoinGroups) > 0 {
		pairs = append(pairs, kvPair{"JoinGroups", strMap(g.JoinGroups)})
	}
	if len(g.AliasConfig) > 0 {
		outer := jen.Dict{}
		for _, alias := range slices.Sorted(maps.Keys(g.AliasConfig)) {
			inner := jen.Dict{}
			for k, v := range g.AliasConfig[alias] {
				if i, ok := v.(int64); ok {
					v = int(i)
				}
				inner[jen.Lit(k)] = jen.Lit(v)
			}
			outer[jen.Lit(alias)] = jen.Map(jen.String()).Any().Values(inner)
		}
		pairs = append(pairs, kvPair{"AliasConfig", jen.Map(jen.String()).Map(jen.String()).Any().Values(outer)})
	}
	if g.UnreadCount != "" {
		pairs = append(pairs, kvPair{"UnreadCount", jen.Lit(g.UnreadCount)}, kvPair{"UnreadTensors", strList(g.UnreadTensors)})
	}
	for _, k := range []struct{ field, v string }{{"WindowRope", g.WindowRope}, {"KVWindow", g.KVWindow}, {"DoubleWidth", g.DoubleWidth}, {"SparseLayers", g.SparseLayers}} {
		if k.v != "" {
			pairs = append(pairs, kvPair{k.field, jen.Lit(k.v)})
		}
	}
	if g.YarnLogTenth {
		pairs = append(pairs, kvPair{"YarnLogTenth", jen.Lit(true)})
	}
	if len(g.StoredAs) > 0 {
		pairs = append(pairs, kvPair{"StoredAs", strMap(g.StoredAs)})
	}
	if len(g.TrailingAxis) > 0 {
		pairs = append(pairs, kvPair{"TrailingAxis", strList(g.TrailingAxis)})
	}
	if len(g.Copy) > 0 {
		pairs = append(pairs, kvPair{"Copy", strMap(g.Copy)})
	}
	if len(g.LayerValues) > 0 {
		pairs = append(pairs, kvPair{"LayerValues", strMap(g.LayerValues)})
	}
	if len(g.Flags) > 0 {
		pairs = append(pairs, kvPair{"Flags", strMap(g.Flags)})
	}
	if top := ggufTop(a); len(top) > 0 {
		pairs = append(pairs, kvPair{"Top", jen.Map(jen.String()).String().Values(top)})
	}
	pairs = append(pairs,
		kvPair{"Tensors", jen.Map(jen.String()).String().Values(tensors)},
		kvPair{"Layers", jen.Lit(a.Block.Path)},
		kvPair{"Embed", jen.Lit(a.Embed.Path)},
		kvPair{"Norm", jen.Lit(a.Head.NormPath)},
		kvPair{"Head", jen.Lit(a.Head.Name)},
	)
	return jen.Op("&").Qual(nnPkg, "GGUF").Values(fieldsOf(pairs)...)
}

// ggufTop maps llama.cpp's names of the tensors outside the blocks other
// than token_embd, output_norm and output to the checkpoint's: the
// embeddings' norm (token_embd_norm), a learned position table
// (position_embd), an encoder's token-type table (token_types) and the
// per-layer inputs' table, projection and norm, where the architecture
// has them.
func ggufTop(a *Arch) jen.Dict {
	top := jen.Dict{}
	if a.Embed.normFull != "" {
		top[jen.Lit("token_embd_norm")] = jen.Lit(a.Embed.normFull)
	}
	if a.Embed.posPath != "" {
		top[jen.Lit("position_embd")] = jen.Lit(a.Embed.posPath)
	}
	if a.Encoder != nil && a.Encoder.typesPath != "" {
		top[jen.Lit("token_types")] = jen.Lit(a.Encoder.typesPath)
	}
	if p := a.PerLayer; p != nil {
		top[jen.Lit("per_layer_token_embd")] = jen.Lit(p.path(perLayerNames.table))
		top[jen.Lit("per_layer_model_proj")] = jen.Lit(p.path(perLayerNames.proj))
		top[jen.Lit("per_layer_proj_norm")] = jen.Lit(p.path(perLayerNames.norm))
	}
	return top
}

// strMap is a map[string]string literal of entries' keys and values.
func strMap(entries []Entry[F[string]]) *jen.Statement {
	d := jen.Dict{}
	for _, e := range entries {
		d[jen.Lit(e.Key)] = jen.Lit(e.Val.V)
	}
	return jen.Map(jen.String()).String().Values(d)
}

func strList(xs []string) *jen.Statement {
	var items []jen.Code
	for _, x := range xs {
		items = append(items, jen.Lit(x))
	}
	return jen.Index().String().Values(items...)
}

// emitTypes writes the generated types, each with the fields its
// components add: modules and weights, then hyperparameters.
func emitTypes(f *jen.File, a *Arch) {
	n := a.Names
	fields := []jen.Code{fConfig.decl(), jen.Line()}
	fields = append(fields, a.fieldsOf(tModel)...)
	fields = append(fields, jen.Line(), jen.Comment("What the forward pass reads, from the config."), fHidden.decl(), fVocab.decl())
	fields = append(fields, a.paramsOf(tModel)...)
	fields = append(fields, fCaches.decl(), fParams.decl())
	f.Comment(comment(fmt.Sprintf("Model is a loaded %s. Its weights are named as in the checkpoint, in Go's spelling (%s is %s, %s.N is %s[N]).",
		a.Name, a.Embed.Path, a.Embed.Field.name, a.Block.Path, a.Block.Stack.name)))
	f.Type().Id("Model").Struct(fields...)
	f.Line()
	type typ struct {
		t    goType
		name string
		doc  string
	}
	types := []typ{{tLayer, "Layer", fmt.Sprintf("Layer is one decoder layer (%s.N).", a.Block.Path)}}
	if !a.Attn.Absent {
		types = append(types, typ{tAttention, "Attention", fmt.Sprintf("Attention is a layer's self-attention (%s), with its hyperparameters.", n.Attention)})
	}
	for _, x := range a.Mixers.types() {
		types = append(types, typ{x.typeName(), string(x.typeName()), mixerDoc(x, x.field().doc)})
	}
	if !a.MLP.Absent {
		types = append(types, typ{tMLP, "MLP", fmt.Sprintf("MLP is a layer's feed-forward block (%s).", n.MLP)})
	}
	for _, t := range types {
		fs := a.fieldsOf(t.t)
		if ps := a.paramsOf(t.t); len(ps) > 0 {
			fs = append(append(fs, jen.Line()), ps...)
		}
		f.Comment(t.doc)
		f.Type().Id(t.name).Struct(fs...)
		f.Line()
	}
}

func emitLoad(f *jen.File, a *Arch) {
	f.Comment(comment("Load reads a model directory as mlx-lm saves it: config.json, and model.safetensors or the shards model.safetensors.index.json lists, in float or mlx-quantized form. Every problem is reported, named by key or tensor."))
	f.Func().Id("Load").Params(jen.Id("dir").String(), jen.Id("opts").Qual(nnPkg, "Options")).Params(jen.Op("*").Id("Model"), jen.Error()).Block(
		jen.Return(jen.Qual(nnPkg, "LoadModel").Call(jen.Id("dir"), jen.Id("opts"), jen.Id("Name"), jen.Id("Aliases"), jen.Id("ParseConfig"), jen.Id("build"))),
	)
	f.Line()
	f.Comment("loadModel is Load as the registry calls it.")
	f.Func().Id("loadModel").Params(jen.Id("dir").String(), jen.Id("opts").Qual(nnPkg, "Options")).Params(jen.Qual(nnPkg, "Model"), jen.Error()).Block(
		jen.List(jen.Id("m"), jen.Err()).Op(":=").Id("Load").Call(jen.Id("dir"), jen.Id("opts")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Id("m"), jen.Nil()),
	)
	f.Line()
	f.Comment(comment("Tensors lists the tensors a checkpoint with this config.json holds, quantized as its quantization block says (every module, as mlx-lm's convert quantizes them, where the block gives no per-module entry)."))
	f.Func().Id("Tensors").Params(jen.Id("data").Index().Byte()).Params(jen.Index().Qual(nnPkg, "TensorSpec"), jen.Error()).Block(
		jen.Return(jen.Qual(nnPkg, "ListTensors").Call(jen.Id("data"), jen.Id("ParseConfig"), jen.Id("build"))),
	)
	f.Line()
}

// emitBuild writes build, which asks w for every module by checkpoint name
// and makes the per-layer tables:
//
//	func build(w *nn.Weights, c *Config) (*Model, error) {
//		w.Drop(...)                                   // what sanitize drops
//		m := &Model{Config: c, hidden: ..., ...}      // the model's hyperparameters
//		rope := w.Rope(...); m.EmbedTokens = ...      // before the layers
//		for i := range m.Layers {
//			l := &m.Layers[i]
//			l.SelfAttn = Attention{heads: ..., rope: rope, ...}
//			a.QProj = lw.Linear("self_attn.q_proj", ...) // every module of the layer
//		}
//		m.Norm = ...; m.LMHead = ...                  // after the layers
//		return m, w.Finish()
//	}
func emitBuild(f *jen.File, a *Arch) {
	body := append(a.bareLines(), a.renameLines()...)
	for _, d := range a.Drops {
		var stmt jen.Code
		switch {
		case d.Layer != nil:
			stmt = jen.Id("w").Dot("DropLayer").Call(jen.Lit(a.Block.Path), d.Layer.Code())
		case d.Contains != "":
			stmt = jen.Id("w").Dot("DropContaining").Call(jen.Lit(d.Contains))
		default:
			stmt = jen.Id("w").Dot("Drop").Call(jen.Lit(d.Name))
		}
		if d.When != nil {
			stmt = jen.If(d.When.Code()).Block(stmt)
		}
		body = append(body, stmt)
	}
	if a.NormShift != nil {
		body = append(body, a.NormShift.load())
	}
	body = append(body, a.Fold.lines()...)
	body = append(body, a.unitRowsLines()...)
	fields := []kvPair{{fConfig.key(), jen.Id("c")}, {fHidden.key(), a.Hidden.Code()}, {fVocab.key(), a.Vocab.Code()}}
	fields = append(fields, a.initsOf(tModel)...)
	if a.Encoder != nil {
		fields = append(fields, kvPair{fCaches.key(), jen.Qual(nnPkg, "EncoderCaches").Call(a.Layers.Code())})
	} else {
		fields = append(fields, kvPair{fCaches.key(), jen.Make(jen.Index().Qual(nnPkg, "CacheSpec"), a.Layers.Code())})
	}
	body = append(body, jen.Id(rModel).Op(":=").Op("&").Id("Model").Values(fieldsOf(fields)...))
	body = append(body, a.buildAt(sBefore)...)
	// One layer: its hyperparameters, its modules in checkpoint order, then
	// its table entries.
	layer := []jen.Code{
		jen.Id(rLayer).Op(":=").Op("&").Add(a.Block.Stack.of(rModel)).Index(jen.Id("i")),
		jen.Id("lw").Op(":=").Id("w").Dot("Layer").Call(jen.Lit(a.Block.Path), jen.Id("i")),
	}
	for _, p := range a.initsOf(tLayer) {
		layer = append(layer, jen.Id(rLayer).Dot(p.key).Op("=").Add(p.val))
	}
	if a.Mixers == nil {
		layer = append(layer,
			a.Attn.Field.of(rLayer).Op("=").Id("Attention").Values(fieldsOf(a.initsOf(tAttention))...),
			jen.Id(rAttn).Op(":=").Op("&").Add(a.Attn.Field.of(rLayer)),
		)
	}
	if !a.MLP.single {
		layer = append(layer, jen.Id(rMLP).Op(":=").Op("&").Add(a.MLP.Field.of(rLayer)))
	}
	layer = append(layer, a.buildAt(sLayer)...)
	body = append(body, jen.For(jen.Id("i").Op(":=").Range().Add(a.Block.Stack.of(rModel))).Block(layer...))
	body = append(body, a.buildAt(sAfter)...)
	body = append(body,
		jen.List(jen.Id("params"), jen.Err()).Op(":=").Id("w").Dot("Finish").Call(),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		fParams.of(rModel).Op("=").Id("params"),
		jen.Return(jen.Id(rModel), jen.Nil()),
	)
	f.Comment(comment("build asks w for every module of the model by checkpoint name, dropping first what mlx-lm's sanitize drops, and makes the per-layer tables the forward pass reads."))
	f.Func().Id("build").Params(jen.Id("w").Op("*").Qual(nnPkg, "Weights"), jen.Id("c").Op("*").Id("Config")).Params(jen.Op("*").Id("Model"), jen.Error()).Block(body...)
	f.Line()
}

func emitAccessors(f *jen.File, a *Arch) {
	which := "one per layer"
	if a.Attn.KVFrom != nil {
		which = "one per layer that keeps keys and values of its own (none for the layers that read an earlier layer's)"
	}
	f.Comment(comment("NewCaches makes the empty caches a sequence starts with, as mlx-lm's make_cache does: " + which + ", a window cache on sliding layers, holding keys and values in the weights' CacheDtype."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("NewCaches").Params().Index().Qual(kvPkg, "Cache").Block(
		jen.Return(jen.Qual(nnPkg, "DefaultCaches").Call(fCaches.of(rModel), fParams.of(rModel))),
	)
	f.Line()
	f.Comment(comment("NewCachesWith is NewCaches with options: a bound on every cache (max KV size), quantized keys and values, the dtype they are held in (unset: the weights' CacheDtype)."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("NewCachesWith").Params(jen.Id("opts").Qual(kvPkg, "Options")).Params(jen.Index().Qual(kvPkg, "Cache"), jen.Error()).Block(
		jen.Return(jen.Qual(nnPkg, "NewCaches").Call(fCaches.of(rModel), fParams.of(rModel).Dot("CacheOptions").Call(jen.Id("opts")))),
	)
	f.Line()
	info := []kvPair{
		{"ModelType", fConfig.of(rModel).Dot("ModelType")},
		{"Arch", jen.Id("Name")},
		{"VocabSize", fVocab.of(rModel)},
		{"Layers", jen.Len(a.Block.Stack.of(rModel))},
		{"Hidden", fHidden.of(rModel)},
		{"Dtype", a.Embed.Field.of(rModel).Dot("Dtype").Call()},
		{"Nbytes", fParams.of(rModel).Dot("Nbytes").Call()},
		{"CacheDtype", fParams.of(rModel).Dot("CacheDtype").Call()},
	}
	if a.Encoder != nil {
		info = append(info, kvPair{"Encoder", jen.True()}, kvPair{"Pooling", jen.Lit(a.Encoder.Pooling)})
		info = append(info, a.Encoder.info()...)
	}
	f.Comment("Info is the model's facts.")
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Info").Params().Qual(nnPkg, "Info").Block(
		jen.Return(jen.Qual(nnPkg, "Info").Values(fieldsOf(info)...)),
	)
	f.Line()
	f.Comment("Free releases the weights; the model is unusable afterwards.")
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Free").Params().Block(
		fParams.of(rModel).Dot("Free").Call(),
	)
}
