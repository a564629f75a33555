package gen

import (
	"strings"

	"github.com/dave/jennifer/jen"
)

// Block variants: a mixer kind's layers may wire their norms as another
// block kind than the architecture's (OLMo hybrid: its gated-delta layers
// pre-norm, its attention layers OLMo-2's post-norm), set by the kind's
// `block` option. Each variant is a block of its own, with the norm slots
// its kind names by default (slots of one checkpoint name share one
// field); the layer's wiring is chosen at load, as its mixer is, so the
// forward pass stays straight-line: Layer.forward calls the wiring build
// stored, one generated method per block kind.

// blockVariant is a kind's own block, and the kind.
type blockVariant struct {
	kind  mixer
	block *Block
}

// variantWords are the block kinds a mixer kind may wire its layers as;
// "same" is the architecture's.
var variantWords = []string{"same", "pre_norm", "post_norm", "sandwich", "four_norm"}

// wireField is the layer's wiring, chosen at load.
var wireField = newField("wire", func() *jen.Statement {
	return jen.Func().Params(jen.Op("*").Qual(mlxPkg, "Graph"), arrayType(), jen.Qual(mlxPkg, "AttentionMask"), jen.Qual(kvPkg, "Cache")).Add(arrayType())
}, "the layer's norms' wiring, chosen at load by its mixer's kind")

// resolveVariants makes the blocks of the mixer kinds that wire their
// layers as another kind.
func (b *builder) resolveVariants() error {
	a := b.a
	if a.Mixers == nil {
		return nil
	}
	shared := map[string]*field{}
	for _, s := range a.Block.Slots {
		shared[s.Name] = s.Field
	}
	for i, x := range a.Mixers.Kinds {
		kind := a.Mixers.Blocks[i]
		if kind == "" || kind == a.Block.Kind {
			continue
		}
		if a.Block.Kind == parallelBlock || a.Block.Kind == singleBlock || a.Mixers.residual() || a.Block.ClipResidual {
			return errAt(b.d.Structure.Block.Pos, "structure.block", "a mixer kind's own block (%s) beside a %s block is not supported", kind, a.Block.Kind)
		}
		v := &Block{Kind: kind, norm: a.Norm, attn: a.Mixers, mlp: a.MLP, scales: &a.Scalars, Count: a.Layers,
			Path: a.Block.Path, Stack: a.Block.Stack, method: "forward" + goName(string(kind))}
		for slot, name := range slotNames(kind) {
			if name == "" {
				continue
			}
			f, ok := shared[name]
			if !ok {
				f = a.Norm.field(goName(name), name)
				shared[name] = f
			}
			v.Slots = append(v.Slots, &NormSlot{Slot: Slot(slot), Name: name, Field: f})
		}
		a.Block.variants = append(a.Block.variants, blockVariant{kind: x, block: v})
	}
	if len(a.Block.variants) > 0 {
		a.Block.method = "forward" + goName(string(a.Block.Kind))
	}
	return nil
}

// variantFields are the layer's norm fields of every block, once each,
// and the wiring's.
func (b *Block) variantFields() []jen.Code {
	seen := map[string]bool{}
	var out []jen.Code
	for _, blk := range append([]*Block{b}, b.variantBlocks()...) {
		for _, s := range blk.Slots {
			if !seen[s.Field.name] {
				seen[s.Field.name] = true
				out = append(out, s.Field.decl())
			}
		}
	}
	return append(out, wireField.decl())
}

func (b *Block) variantBlocks() []*Block {
	var out []*Block
	for _, v := range b.variants {
		out = append(out, v.block)
	}
	return out
}

// branch is a layer's norm loads and wiring, in the build branch of the
// layers kind x mixes (nil: attention's).
func (b *Block) branch(x mixer) []jen.Code {
	if len(b.variants) == 0 {
		return nil
	}
	blk := b
	for _, v := range b.variants {
		if v.kind == x {
			blk = v.block
		}
	}
	var out []jen.Code
	for _, s := range blk.Slots {
		out = append(out, s.Field.of(rLayer).Op("=").Add(b.norm.loadAt("lw", s.Name, fHidden.of(rModel), int(s.Slot))))
	}
	return append(out, wireField.of(rLayer).Op("=").Id(rLayer).Dot(blk.method))
}

// emitWire writes Layer.forward as the call of the wiring build chose.
func (b *Block) emitWire(f *jen.File) {
	var kinds []string
	for _, blk := range append([]*Block{b}, b.variantBlocks()...) {
		kinds = append(kinds, string(blk.Kind))
	}
	f.Comment(comment("forward is the layer, wired as its mixer's kind wires it (" + strings.Join(kinds, ", ") + "), as build chose."))
	f.Func().Params(jen.Id(rLayer).Op("*").Id("Layer")).Id("forward").Params(
		graphParam(), jen.Id("x").Add(arrayType()), jen.Id("mask").Qual(mlxPkg, "AttentionMask"), jen.Id("c").Qual(kvPkg, "Cache"),
	).Add(arrayType()).Block(jen.Return(wireField.of(rLayer).Call(g(), jen.Id("x"), jen.Id("mask"), jen.Id("c"))))
	f.Line()
	for _, blk := range append([]*Block{b}, b.variantBlocks()...) {
		blk.emitWiring(f)
	}
}
