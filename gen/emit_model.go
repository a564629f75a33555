package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// genVersion is the version of runtime/mlx's API this generator writes
// code for; generated code refuses to build against a runtime outside
// mlx.MinGenVersion..mlx.MaxGenVersion.
const genVersion = 1

// emitModel writes model.go: the weight types, Load, Tensors, build,
// NewCaches, Info and Free.
//
//	type Model struct { EmbedTokens *nn.Embedding; Layers []Layer; ...; heads int; ... }
//	type Layer struct { SelfAttn Attention; MLP MLP; InputLayernorm *nn.RMSNorm; ...; rope nn.Rope }
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
	f.Var().Id("Arch").Op("=").Qual(nnPkg, "Arch").Values(fieldsOf([]kvPair{
		{"Name", jen.Id("Name")},
		{"Tier", jen.Lit(a.Tier)},
		{"Aliases", jen.Id("Aliases")},
		{"Doc", jen.Lit(a.FirstSentence())},
		{"Load", jen.Id("loadModel")},
		{"Tensors", jen.Id("Tensors")},
		{"Config", jen.Func().Params(jen.Id("data").Index().Byte()).Params(jen.Any(), jen.Error()).Block(jen.Return(jen.Id("ParseConfig").Call(jen.Id("data"))))},
		{"Derived", strList(a.DerivedKeys())},
		{"Ignored", jen.Id("IgnoredKeys")},
	})...)
	f.Line()
	emitTypes(f, a)
	emitLoad(f, a)
	emitBuild(f, a)
	emitAccessors(f, a)
	return render(f)
}

func strList(xs []string) *jen.Statement {
	var items []jen.Code
	for _, x := range xs {
		items = append(items, jen.Lit(x))
	}
	return jen.Index().String().Values(items...)
}

func nnType(name string) *jen.Statement { return jen.Op("*").Qual(nnPkg, name) }

func emitTypes(f *jen.File, a *Arch) {
	n := a.Names
	norm := a.NormType()
	fields := []jen.Code{
		jen.Id("Config").Op("*").Id("Config"),
		jen.Line(),
		jen.Id(goName(n.Embed)).Add(nnType("Embedding")).Comment(a.EmbedPath()),
		jen.Id(goName(n.Layers)).Index().Id("Layer").Comment(a.LayersPath() + ".N"),
		jen.Id(goName(n.Norm)).Add(nnType(norm)).Comment(a.NormPath()),
		jen.Id(goName(n.LMHead)).Add(nnType("Linear")).Comment(n.LMHead + "; the embedding table itself when the head is tied"),
		jen.Line(),
		jen.Comment("What the forward pass reads, from the config."),
		jen.Id("hidden").Op(",").Id("vocab").Int(),
		jen.Id("heads").Op(",").Id("kvHeads").Op(",").Id("headDim").Int(),
		jen.Id("scale").Float32().Comment(inline("attention: " + a.Attn.Scale.Text)),
	}
	for _, x := range []struct {
		v    *Value
		name string
	}{
		{a.EmbedScale, "embedScale"}, {a.ResidualScale, "residualScale"}, {a.Attn.Softcap, "attnSoftcap"},
		{a.Head.Divide, "logitsDivisor"}, {a.Head.Softcap, "finalSoftcap"},
	} {
		if x.v != nil {
			fields = append(fields, jen.Id(x.name).Float64().Comment(inline(x.v.Text)))
		}
	}
	if a.Sliding() {
		fields = append(fields,
			jen.Id("window").Int().Comment(inline(a.Attn.Window.Text)),
			jen.Id("fullLayer").Op(",").Id("slidingLayer").Int().Comment("the layers whose caches make the masks"))
	}
	fields = append(fields,
		jen.Id("caches").Index().Qual(nnPkg, "CacheSpec").Comment("per layer"),
		jen.Id("params").Add(nnType("Params")),
	)
	f.Comment(comment(fmt.Sprintf("Model is a loaded %s. Its weights are named as in the checkpoint, in Go's spelling (%s.%s is %s, %s.N is %s[N]).",
		a.Name, a.Names.Model, n.Embed, goName(n.Embed), a.LayersPath(), goName(n.Layers))))
	f.Type().Id("Model").Struct(fields...)
	f.Line()

	lf := []jen.Code{
		jen.Id(goName(n.Attention)).Id("Attention").Comment(n.Attention),
		jen.Id(goName(n.MLP)).Id("MLP").Comment(n.MLP),
	}
	for _, s := range a.BlockNorms() {
		lf = append(lf, jen.Id(s.Field).Add(nnType(norm)).Comment(s.Name))
	}
	if a.HasRope() || a.Sliding() {
		lf = append(lf, jen.Line())
	}
	if a.HasRope() {
		doc := "the rope of this layer"
		if a.Rope.Layers != nil {
			doc += " (nn.NoRope where " + inline(a.Rope.Layers.Text) + " is false)"
		}
		lf = append(lf, jen.Id("rope").Qual(nnPkg, "Rope").Comment(doc))
	}
	if a.Sliding() {
		lf = append(lf, jen.Id("mask").Int().Comment("the mask it attends with: 0 full, 1 sliding window"))
	}
	f.Comment(fmt.Sprintf("Layer is one decoder layer (%s.N).", a.LayersPath()))
	f.Type().Id("Layer").Struct(lf...)
	f.Line()

	var af []jen.Code
	for _, p := range a.AttnProjs() {
		af = append(af, jen.Id(p.Field).Add(nnType("Linear")).Comment(p.Name))
	}
	if a.Attn.QKNorm != "none" {
		af = append(af,
			jen.Id(goName(n.QNorm)).Add(nnType(norm)).Comment(n.QNorm),
			jen.Id(goName(n.KNorm)).Add(nnType(norm)).Comment(n.KNorm))
	}
	f.Comment(fmt.Sprintf("Attention is a layer's self-attention (%s).", n.Attention))
	f.Type().Id("Attention").Struct(af...)
	f.Line()

	var mf []jen.Code
	for _, p := range a.MLPProjs() {
		mf = append(mf, jen.Id(p.Field).Add(nnType("Linear")).Comment(p.Name))
	}
	f.Comment(fmt.Sprintf("MLP is a layer's feed-forward block (%s).", n.MLP))
	f.Type().Id("MLP").Struct(mf...)
	f.Line()
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
// and makes the per-layer tables.
func emitBuild(f *jen.File, a *Arch) {
	n := a.Names
	c := func(v *Value) *jen.Statement { return v.Code() }
	var body []jen.Code
	for _, d := range a.Drops {
		var stmt jen.Code
		if d.Contains != "" {
			stmt = jen.Id("w").Dot("DropContaining").Call(jen.Lit(d.Contains))
		} else {
			stmt = jen.Id("w").Dot("Drop").Call(jen.Lit(d.Name))
		}
		if d.When != nil {
			stmt = jen.If(d.When.Code()).Block(stmt)
		}
		body = append(body, stmt)
	}
	fields := []kvPair{
		{"Config", jen.Id("c")},
		{"hidden", c(a.Hidden)},
		{"vocab", c(a.Vocab)},
		{"heads", c(a.Attn.Heads)},
		{"kvHeads", c(a.Attn.KVHeads)},
		{"headDim", c(a.Attn.HeadDim)},
		{"scale", a.Attn.Scale.Float32()},
	}
	for _, x := range []struct {
		v    *Value
		name string
	}{
		{a.EmbedScale, "embedScale"}, {a.ResidualScale, "residualScale"}, {a.Attn.Softcap, "attnSoftcap"},
		{a.Head.Divide, "logitsDivisor"}, {a.Head.Softcap, "finalSoftcap"},
	} {
		if x.v != nil {
			fields = append(fields, kvPair{x.name, x.v.Code()})
		}
	}
	if a.Sliding() {
		fields = append(fields, kvPair{"window", c(a.Attn.Window)})
	}
	fields = append(fields, kvPair{"caches", jen.Make(jen.Index().Qual(nnPkg, "CacheSpec"), c(a.Layers))})
	body = append(body, jen.Id("m").Op(":=").Op("&").Id("Model").Values(fieldsOf(fields)...))
	if a.HasRope() {
		spec := []kvPair{
			{"Kind", jen.Qual(nnPkg, a.RopeKindConst())},
			{"Dims", c(a.Rope.Dims)},
			{"Base", c(a.Rope.Base)},
			{"Traditional", c(a.Rope.Traditional)},
		}
		if a.Rope.Scaling != nil {
			spec = append(spec, kvPair{"Scaling", jen.Id("c").Dot(a.Rope.Scaling.Field)})
		}
		if a.Rope.MaxPositions != nil {
			spec = append(spec, kvPair{"MaxPositions", c(a.Rope.MaxPositions)})
		}
		if a.Rope.OriginalMaxPositions != nil {
			spec = append(spec, kvPair{"OriginalMaxPositions", c(a.Rope.OriginalMaxPositions)})
		}
		body = append(body, jen.Id("rope").Op(":=").Id("w").Dot("Rope").Call(jen.Qual(nnPkg, "RopeSpec").Values(fieldsOf(spec)...)))
	}
	eps := c(a.Eps)
	normOf := func(w, name string, dims jen.Code) *jen.Statement {
		return jen.Id(w).Dot(a.NormLoader()).Call(jen.Lit(name), dims, eps.Clone())
	}
	body = append(body,
		jen.Id("m").Dot(goName(n.Embed)).Op("=").Id("w").Dot("Embedding").Call(jen.Lit(a.EmbedPath()), c(a.Vocab), m("hidden")),
		jen.Id("m").Dot(goName(n.Layers)).Op("=").Make(jen.Index().Id("Layer"), c(a.Layers)),
	)
	if a.Sliding() {
		body = append(body, jen.Id("sliding").Op(":=").Make(jen.Index().Bool(), jen.Len(jen.Id("m").Dot(goName(n.Layers)))))
	}
	// One layer: its modules in checkpoint order, then its table entries.
	var layer []jen.Code
	layer = append(layer,
		jen.Id("l").Op(":=").Op("&").Id("m").Dot(goName(n.Layers)).Index(jen.Id("i")),
		jen.Id("lw").Op(":=").Id("w").Dot("Layer").Call(jen.Lit(a.LayersPath()), jen.Id("i")),
	)
	attn := jen.Id("l").Dot(goName(n.Attention))
	for _, p := range a.AttnProjs() {
		layer = append(layer, attn.Clone().Dot(p.Field).Op("=").Id("lw").Dot("Linear").Call(jen.Lit(n.Attention+"."+p.Name), p.Out, p.In, p.Bias.Code()))
	}
	if a.Attn.QKNorm != "none" {
		qd, kd := a.QKNormDims()
		layer = append(layer,
			attn.Clone().Dot(goName(n.QNorm)).Op("=").Add(normOf("lw", n.Attention+"."+n.QNorm, qd)),
			attn.Clone().Dot(goName(n.KNorm)).Op("=").Add(normOf("lw", n.Attention+"."+n.KNorm, kd)))
	}
	mlp := jen.Id("l").Dot(goName(n.MLP))
	for _, p := range a.MLPProjs() {
		layer = append(layer, mlp.Clone().Dot(p.Field).Op("=").Id("lw").Dot("Linear").Call(jen.Lit(n.MLP+"."+p.Name), p.Out, p.In, p.Bias.Code()))
	}
	for _, s := range a.BlockNorms() {
		layer = append(layer, jen.Id("l").Dot(s.Field).Op("=").Add(normOf("lw", s.Name, m("hidden"))))
	}
	if a.HasRope() {
		if a.Rope.Layers != nil {
			layer = append(layer, jen.Id("l").Dot("rope").Op("=").Qual(nnPkg, "RopeOrNone").Call(a.Rope.Layers.Code(), jen.Id("rope")))
		} else {
			layer = append(layer, jen.Id("l").Dot("rope").Op("=").Id("rope"))
		}
	}
	if a.Sliding() {
		layer = append(layer,
			jen.Id("sliding").Index(jen.Id("i")).Op("=").Add(a.Attn.Sliding.Code()),
			jen.If(jen.Id("sliding").Index(jen.Id("i"))).Block(
				jen.Id("l").Dot("mask").Op("=").Lit(1),
				jen.Id("m").Dot("caches").Index(jen.Id("i")).Dot("Window").Op("=").Id("m").Dot("window"),
			))
	}
	body = append(body, jen.For(jen.Id("i").Op(":=").Range().Id("m").Dot(goName(n.Layers))).Block(layer...))
	body = append(body, jen.Id("m").Dot(goName(n.Norm)).Op("=").Add(normOf("w", a.NormPath(), m("hidden"))))
	tied := jen.Id("m").Dot(goName(n.LMHead)).Op("=").Id("m").Dot(goName(n.Embed)).Dot("AsLinear").Call()
	untied := jen.Id("m").Dot(goName(n.LMHead)).Op("=").Id("w").Dot("Linear").Call(jen.Lit(n.LMHead), c(a.Vocab), m("hidden"), jen.False())
	switch {
	case a.Head.Tied.IsTrue():
		body = append(body, tied)
	case a.Head.Tied.IsFalse():
		body = append(body, untied)
	default:
		body = append(body, jen.If(a.Head.Tied.Code()).Block(tied).Else().Block(untied))
	}
	if a.Sliding() {
		body = append(body,
			jen.Var().Err().Error(),
			jen.List(jen.Id("m").Dot("fullLayer"), jen.Id("m").Dot("slidingLayer"), jen.Err()).Op("=").Qual(nnPkg, "MaskLayers").Call(jen.Id("sliding")),
			jen.Id("w").Dot("Fail").Call(jen.Err()),
		)
	}
	body = append(body,
		jen.List(jen.Id("params"), jen.Err()).Op(":=").Id("w").Dot("Finish").Call(),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Id("m").Dot("params").Op("=").Id("params"),
		jen.Return(jen.Id("m"), jen.Nil()),
	)
	f.Comment(comment("build asks w for every module of the model by checkpoint name, dropping first what mlx-lm's sanitize drops, and makes the per-layer tables the forward pass reads."))
	f.Func().Id("build").Params(jen.Id("w").Op("*").Qual(nnPkg, "Weights"), jen.Id("c").Op("*").Id("Config")).Params(jen.Op("*").Id("Model"), jen.Error()).Block(body...)
	f.Line()
}

func emitAccessors(f *jen.File, a *Arch) {
	f.Comment(comment("NewCaches makes the empty caches a sequence starts with, as mlx-lm's make_cache does: one per layer, a window cache on sliding layers."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("NewCaches").Params().Index().Qual(kvPkg, "Cache").Block(
		jen.Return(jen.Qual(nnPkg, "DefaultCaches").Call(jen.Id("m").Dot("caches"))),
	)
	f.Line()
	f.Comment(comment("NewCachesWith is NewCaches with options: a bound on every cache (max KV size), quantized keys and values."))
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("NewCachesWith").Params(jen.Id("opts").Qual(kvPkg, "Options")).Params(jen.Index().Qual(kvPkg, "Cache"), jen.Error()).Block(
		jen.Return(jen.Qual(nnPkg, "NewCaches").Call(jen.Id("m").Dot("caches"), jen.Id("opts"))),
	)
	f.Line()
	f.Comment("Info is the model's facts.")
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Info").Params().Qual(nnPkg, "Info").Block(
		jen.Return(jen.Qual(nnPkg, "Info").Values(fieldsOf([]kvPair{
			{"ModelType", jen.Id("m").Dot("Config").Dot("ModelType")},
			{"Arch", jen.Id("Name")},
			{"VocabSize", jen.Id("m").Dot("vocab")},
			{"Layers", jen.Len(jen.Id("m").Dot(goName(a.Names.Layers)))},
			{"Hidden", jen.Id("m").Dot("hidden")},
			{"Dtype", jen.Id("m").Dot(goName(a.Names.Embed)).Dot("Dtype").Call()},
			{"Nbytes", jen.Id("m").Dot("params").Dot("Nbytes").Call()},
		})...)),
	)
	f.Line()
	f.Comment("Free releases the weights; the model is unusable afterwards.")
	f.Func().Params(jen.Id("m").Op("*").Id("Model")).Id("Free").Params().Block(
		jen.Id("m").Dot("params").Dot("Free").Call(),
	)
}
