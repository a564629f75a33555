package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// The block: a decoder layer is attention then the MLP, each a residual
// branch, with a norm in any of four slots: before and after each
// sublayer. A block kind is a set of filled slots with their default
// checkpoint names; sandwich and four_norm are the same shape under other
// names.

// BlockKind names a preset of norm slots.
type BlockKind string

// Slot is where a norm sits in a layer.
type Slot int

const (
	AttnIn  Slot = iota // before attention, on its input
	AttnOut             // after attention, on its output
	MLPIn               // before the MLP
	MLPOut              // after the MLP
)

// slotKeys are the slots' weights.names keys.
var slotKeys = [...]string{"attn_in_norm", "attn_out_norm", "mlp_in_norm", "mlp_out_norm"}

// blockKinds are the block kinds: each slot's default checkpoint name, ""
// where the kind has no norm.
var blockKinds = []struct {
	kind  BlockKind
	names [4]string
}{
	{"pre_norm", [4]string{"input_layernorm", "", "post_attention_layernorm", ""}},
	{"post_norm", [4]string{"", "post_attention_layernorm", "", "post_feedforward_layernorm"}},
	{"sandwich", [4]string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"}},
	{"four_norm", [4]string{"input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm"}},
	{parallelBlock, [4]string{"input_layernorm", "", "", ""}}, // block_parallel.go
	{singleBlock, [4]string{"norm", "", "", ""}},              // block_single.go
	// BERT's layer: each sublayer's output added to its input, the sum
	// normed (attention.output.LayerNorm, output.LayerNorm).
	{postResidualBlock, [4]string{"", "attention.output.LayerNorm", "", "output.LayerNorm"}},
}

// postResidualBlock norms each residual sum, not a sublayer's input or
// output: h = norm(x + attn(x)), norm(h + mlp(h)) (BERT's post-LN layer).
const postResidualBlock BlockKind = "post_residual"

func (BlockKind) values() []string {
	var out []string
	for _, k := range blockKinds {
		out = append(out, string(k.kind))
	}
	return out
}

// slotNames are a block kind's default norm names by slot.
func slotNames(k BlockKind) [4]string {
	for _, b := range blockKinds {
		if b.kind == k {
			return b.names
		}
	}
	return [4]string{}
}

// slotName is the weights.names leaf of a slot.
func slotName(n *Names, s Slot) *F[string] {
	return [...]*F[string]{&n.AttnIn, &n.AttnOut, &n.MLPIn, &n.MLPOut}[s]
}

// NormSlot is one filled slot of a layer.
type NormSlot struct {
	Slot  Slot
	Name  string // checkpoint name, relative to the layer
	Field *field
}

// Block is the decoder layer, resolved.
type Block struct {
	none
	Kind  BlockKind
	Slots []*NormSlot // in checkpoint order
	Stack *field      // Model's []Layer
	Path  string      // the stack's checkpoint prefix
	Count *Value      // the layer count
	// ClipResidual: in float16 each residual sum is taken in float32 and
	// clipped to float16's range (nn.AddClipped).
	ClipResidual bool
	// LayerScale is a learned [1] of each layer multiplying its output
	// (nil: none); layerScaleName is its checkpoint name in the layer.
	LayerScale     *field
	layerScaleName string
	perLayer       *PerLayerInputs // nil: no per-layer inputs
	norm           *Norm
	attn           layerMixer // attention, or the mixer slot (mixer.go)
	mlp            *MLP
	scales         *Scalars
	// variants are mixer kinds' own blocks (block_variants.go); method is
	// the name of this block's wiring, forward unless there are variants.
	variants []blockVariant
	method   string
}

func (b *Block) slot(s Slot) *NormSlot {
	for _, x := range b.Slots {
		if x.Slot == s {
			return x
		}
	}
	return nil
}

func (b *Block) fields(t goType) []jen.Code {
	switch t {
	case tModel:
		return []jen.Code{b.Stack.decl()}
	case tLayer:
		if len(b.variants) > 0 {
			return b.variantFields()
		}
		var out []jen.Code
		for _, s := range b.Slots {
			out = append(out, s.Field.decl())
		}
		if b.LayerScale != nil {
			out = append(out, b.LayerScale.decl())
		}
		return out
	}
	return nil
}

func (b *Block) build(s stage) []jen.Code {
	if s == sBefore {
		return []jen.Code{b.Stack.of(rModel).Op("=").Make(jen.Index().Id("Layer"), b.Count.Code())}
	}
	if s != sLayer || len(b.variants) > 0 {
		return nil // with variants, each branch of the mixers loads its norms
	}
	var out []jen.Code
	for _, x := range b.Slots {
		load := x.Field.of(rLayer).Op("=").Add(b.norm.loadAt("lw", x.Name, fHidden.of(rModel), int(x.Slot)))
		if absent := b.norm.Absent[x.Slot]; absent != nil {
			// a layer without the norm keeps a nil one, which passes x on
			load = jen.If(jen.Op("!").Parens(absent.Code())).Block(load)
		}
		out = append(out, load)
	}
	if b.LayerScale != nil {
		out = append(out, b.LayerScale.of(rLayer).Op("=").Id("lw").Dot("Vector").Call(jen.Lit(b.layerScaleName), jen.Lit(1)))
	}
	return out
}

// doc describes the layer's wiring from its slots.
func (b *Block) doc() string {
	switch b.Kind {
	case parallelBlock:
		return b.parallelDoc()
	case singleBlock:
		return b.singleDoc()
	case postResidualBlock:
		return "a post-norm layer: each sublayer's output is added to its input and the sum normed (h = norm(x + attn(x)), then norm(h + mlp(h)))"
	}
	in, out := b.slot(AttnIn) != nil, b.slot(AttnOut) != nil
	if (b.slot(MLPIn) != nil) != in || (b.slot(MLPOut) != nil) != out {
		return "a decoder layer: attention, then the MLP, each a residual branch with the norms its slots hold"
	}
	var parts []string
	if in {
		parts = append(parts, "each sublayer reads a normed copy of the residual stream")
	} else {
		parts = append(parts, "each sublayer reads the residual stream as it is")
	}
	if out {
		parts = append(parts, "its output is normed before it is added back")
	} else {
		parts = append(parts, "adds its output back")
	}
	names := make([]string, len(b.Slots))
	for i, s := range b.Slots {
		names[i] = s.Name
	}
	return fmt.Sprintf("a decoder layer with %s: %s", strings.Join(names, ", "), strings.Join(parts, ", and "))
}

// emitForward writes Layer.forward, the residual wiring:
//
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array {
//		r := l.SelfAttn.forward(g, l.InputLayernorm.Apply(g, x), mask, c)
//		h, hn := l.PostAttentionLayernorm.AddApply(g, x, r) // x + r, and it normed
//		r = l.MLP.forward(g, hn)
//		return g.Add(h, r)
//	}
func (b *Block) emitForward(f *jen.File) {
	if len(b.variants) > 0 {
		b.emitWire(f)
		return
	}
	b.emitWiring(f)
}

// emitWiring writes the block's wiring, as the method b.method (forward).
func (b *Block) emitWiring(f *jen.File) {
	switch b.Kind {
	case parallelBlock:
		b.emitParallel(f)
		return
	case singleBlock:
		b.emitSingle(f)
		return
	case postResidualBlock:
		b.emitPostResidual(f)
		return
	}
	normed := func(s Slot, x jen.Code) jen.Code {
		if n := b.slot(s); n != nil {
			return apply(n.Field.of(rLayer), x)
		}
		return x
	}
	if m, ok := b.attn.(*Mixers); ok && m.residual() {
		b.emitResidual(f, m, normed)
		return
	}
	branch := func(out Slot, op string, sub *jen.Statement) []jen.Code {
		stmts := []jen.Code{jen.Id("r").Op(op).Add(sub)}
		if n := b.slot(out); n != nil {
			stmts = append(stmts, jen.Id("r").Op("=").Add(apply(n.Field.of(rLayer), jen.Id("r"))))
		}
		if s := b.scales.Get(ResidualScale); s != nil {
			stmts = append(stmts, jen.Id("r").Op("=").Add(call("MultiplyScalar", jen.Id("r"), s.of(rLayer))).Comment(inline(s.Value.Text)))
		}
		return stmts
	}
	add := func(x, y string) *jen.Statement {
		if b.ClipResidual {
			return jen.Qual(nnPkg, "AddClipped").Call(g(), jen.Id(x), jen.Id(y))
		}
		return call("Add", jen.Id(x), jen.Id(y))
	}
	var body []jen.Code
	body = append(body, branch(AttnOut, ":=", b.attn.forward(normed(AttnIn, jen.Id("x"))))...)
	if n := b.slot(MLPIn); n != nil && !b.ClipResidual {
		// The residual update and the MLP's norm in one op.
		body = append(body, jen.List(jen.Id("h"), jen.Id("hn")).Op(":=").Add(n.Field.of(rLayer).Dot("AddApply").Call(g(), jen.Id("x"), jen.Id("r"))).Comment("x + r, and it normed"))
		body = append(body, branch(MLPOut, "=", b.mlp.forwardFrom(jen.Id("h"), jen.Id("hn")))...)
	} else {
		body = append(body, jen.Id("h").Op(":=").Add(add("x", "r")))
		body = append(body, branch(MLPOut, "=", b.mlp.forwardFrom(jen.Id("h"), normed(MLPIn, jen.Id("h"))))...)
	}
	out := add("h", "r")
	if b.perLayer != nil {
		out = b.perLayer.mix(out)
	}
	if b.LayerScale != nil {
		out = call("Multiply", out, b.LayerScale.of(rLayer))
	}
	body = append(body, jen.Return(out))
	doc := b.doc()
	if b.perLayer != nil {
		doc += "; the layer's input vector in (nil without them) is mixed into its output by its gate"
	}
	if b.LayerScale != nil {
		doc += "; the layer's output (the residual stream) is multiplied by its learned " + b.layerScaleName
	}
	if b.ClipResidual {
		doc += "; in float16 each residual sum is taken in float32 and clipped to float16's range"
	}
	method := b.method
	if method == "" {
		method = "forward"
	}
	params := []jen.Code{graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache")}
	if b.perLayer != nil {
		params = append(params, jen.Id("in").Add(arrayType()))
	}
	f.Comment(comment(fmt.Sprintf("%s is %s.", method, doc)))
	f.Func().Params(jen.Id(rLayer).Op("*").Id("Layer")).Id(method).Params(params...).Add(arrayType()).Block(body...)
	f.Line()
}

// emitPostResidual writes a post_residual block's Layer.forward:
//
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array {
//		r := l.Attention.forward(g, x, mask, c)
//		_, h := l.AttentionOutputLayerNorm.AddApply(g, x, r) // norm(x + r)
//		r = l.MLP.forward(g, h)
//		_, h = l.OutputLayerNorm.AddApply(g, h, r)
//		return h
//	}
func (b *Block) emitPostResidual(f *jen.File) {
	attnNorm, mlpNorm := b.slot(AttnOut).Field.of(rLayer), b.slot(MLPOut).Field.of(rLayer)
	body := []jen.Code{
		jen.Id("r").Op(":=").Add(b.attn.forward(jen.Id("x"))),
		jen.List(jen.Id("_"), jen.Id("h")).Op(":=").Add(attnNorm.Dot("AddApply").Call(g(), jen.Id("x"), jen.Id("r"))).Comment("norm(x + r)"),
		jen.Id("r").Op("=").Add(b.mlp.forward(jen.Id("h"))),
		jen.List(jen.Id("_"), jen.Id("h")).Op("=").Add(mlpNorm.Dot("AddApply").Call(g(), jen.Id("h"), jen.Id("r"))).Comment("norm(h + r)"),
		jen.Return(jen.Id("h")),
	}
	f.Comment(comment(fmt.Sprintf("forward is %s.", b.doc())))
	f.Func().Params(jen.Id(rLayer).Op("*").Id("Layer")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// emitResidual writes Layer.forward where the mixers add to the residual
// stream themselves (a kind beside attention, block.go's checks):
//
//	func (l *Layer) forward(g, x, mask, c) *mlx.Array {
//		h := l.mix(g, x, l.InputLayernorm.Apply(g, x), mask, c) // (x + first) + second
//		r := l.MLP.forward(g, l.PreFfLayernorm.Apply(g, h))
//		return g.Add(h, r)
//	}
func (b *Block) emitResidual(f *jen.File, m *Mixers, normed func(Slot, jen.Code) jen.Code) {
	body := []jen.Code{
		jen.Id("h").Op(":=").Add(m.forwardResidual(jen.Id("x"), normed(AttnIn, jen.Id("x")))).Comment("x plus each mixer's output, in turn"),
		jen.Id("r").Op(":=").Add(b.mlp.forward(normed(MLPIn, jen.Id("h")))),
		jen.Return(call("Add", jen.Id("h"), jen.Id("r"))),
	}
	f.Comment(comment(fmt.Sprintf("forward is %s; the token mixers (two where a kind attends beside itself) each add their output to the residual stream in turn.", b.doc())))
	f.Func().Params(jen.Id(rLayer).Op("*").Id("Layer")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(body...)
	f.Line()
}

// resolveBlock makes the decoder layer from the resolved components: its
// kind's norm slots, named by weights.names (a kind's slots only).
func (b *builder) resolveBlock() error {
	s, a := &b.d.Structure, b.a
	var mix layerMixer = a.Attn
	if a.Mixers != nil {
		mix = a.Mixers
	}
	a.Block = &Block{Kind: s.Block.V, norm: a.Norm, attn: mix, mlp: a.MLP, scales: &a.Scalars, Count: a.Layers,
		Path: a.path(a.Names.Layers), ClipResidual: s.ClipResidual.V, perLayer: a.PerLayer}
	a.Block.Stack = newField(goName(a.Names.Layers), func() *jen.Statement { return jen.Index().Id("Layer") }, a.Block.Path+".N")
	n := &b.d.Weights.Names
	defaults := slotNames(s.Block.V)
	for slot := AttnIn; slot <= MLPOut; slot++ {
		f := slotName(n, slot)
		if defaults[slot] == "" {
			if f.IsSet() && s.Block.V == parallelBlock && slot == MLPIn {
				// a parallel block's MLP may read a norm of its own (GPT-NeoX)
				a.Block.Slots = append(a.Block.Slots, &NormSlot{Slot: slot, Name: f.V, Field: a.Norm.field(goName(f.V), f.V)})
				continue
			}
			if f.IsSet() {
				return errAt(f.Pos, "weights.names."+slotKeys[slot], "a %s block has no such norm", s.Block.V)
			}
			continue
		}
		a.Block.Slots = append(a.Block.Slots, &NormSlot{Slot: slot, Name: f.V, Field: a.Norm.field(goName(f.V), f.V)})
	}
	if sl := a.Attn.Sliding; sl != nil {
		sl.stack, sl.count = a.Block.Stack, a.Layers
	}
	if ls := s.LayerScale; ls.IsSet() && strings.TrimSpace(ls.V) != "" {
		if err := b.wiredAfter(ls.Pos, "structure.layer_scale", "layer scale"); err != nil {
			return err
		}
		a.Block.layerScaleName = strings.TrimSpace(ls.V)
		a.Block.LayerScale = newField(goName(a.Block.layerScaleName), func() *jen.Statement { return jen.Op("*").Qual(mlxPkg, "Array") },
			a.Block.layerScaleName+": multiplies the layer's output [1]")
	}
	if a.MLP.beside() {
		if err := b.wiredAfter(b.d.Structure.MoE.Beside.Pos, "structure.moe.beside_dense", "experts beside the dense MLP"); err != nil {
			return err
		}
	}
	if s.Block.V == postResidualBlock {
		switch {
		case s.ClipResidual.V:
			return errAt(s.ClipResidual.Pos, "structure.clip_residual", "a post_residual block norms each residual sum as it is; clipped sums are not supported with it")
		case a.Scalars.Get(ResidualScale) != nil:
			return errAt(s.ResidualScale.Pos, "structure.residual_scale", "a post_residual block norms each residual sum as it is; a residual scale is not supported with it")
		case a.Mixers != nil:
			return errAt(s.Block.Pos, "structure.block", "a post_residual block holds attention and the MLP; token mixers are not supported with it")
		}
	}
	if a.Mixers != nil && a.Mixers.residual() {
		// the mixers add to the stream themselves: a pre-norm block only
		switch {
		case s.Block.V == parallelBlock || s.Block.V == singleBlock || a.Block.slot(AttnOut) != nil || a.Block.slot(MLPOut) != nil:
			return errAt(s.Block.Pos, "structure.block", "a mixer kind beside attention (with_attention) runs in a block with norms before its sublayers only, not %s", s.Block.V)
		case s.ClipResidual.V:
			return errAt(s.ClipResidual.Pos, "structure.clip_residual", "a mixer kind beside attention (with_attention) adds to the stream in mlx-lm's order; clipped sums are not supported with it")
		case a.Scalars.Get(ResidualScale) != nil:
			return errAt(s.ResidualScale.Pos, "structure.residual_scale", "a mixer kind beside attention (with_attention) adds to the stream unscaled; a residual scale is not supported with it")
		}
	}
	return nil
}

// wiredAfter refuses what acts on a layer's output after its two residual
// sums (noun, at key) where the block is not attention then the MLP in its
// own wiring (emitWiring): a parallel, single or post_residual block, or
// token mixers of other kinds.
func (b *builder) wiredAfter(pos Pos, key, noun string) error {
	switch k := b.d.Structure.Block.V; {
	case k == parallelBlock || k == singleBlock || k == postResidualBlock:
		return errAt(pos, key, "a %s block takes no %s: that needs a block of attention then the MLP", k, noun)
	case b.a.Mixers != nil:
		return errAt(pos, key, "no %s beside token mixers of other kinds: that needs attention layers", noun)
	}
	return nil
}

// blockDefaults: a pre-norm block, its slots named as its kind names them.
func blockDefaults(d *Descriptor) {
	setDefault(&d.Structure.Block, BlockKind("pre_norm"), d.file)
	for slot, name := range slotNames(d.Structure.Block.V) {
		if name != "" {
			setDefault(slotName(&d.Weights.Names, Slot(slot)), name, d.file)
		}
	}
}

// blockRoles are the norm slots' checkpoint names, whose defaults the
// block's kind gives (blockDefaults).
var blockRoles = []nameRole{
	{"attn_in_norm", "", func(n *Names) *F[string] { return &n.AttnIn }, func(r *ResolvedNames) *string { return &r.AttnIn }},
	{"attn_out_norm", "", func(n *Names) *F[string] { return &n.AttnOut }, func(r *ResolvedNames) *string { return &r.AttnOut }},
	{"mlp_in_norm", "", func(n *Names) *F[string] { return &n.MLPIn }, func(r *ResolvedNames) *string { return &r.MLPIn }},
	{"mlp_out_norm", "", func(n *Names) *F[string] { return &n.MLPOut }, func(r *ResolvedNames) *string { return &r.MLPOut }},
}
