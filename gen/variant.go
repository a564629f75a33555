package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// Variants: one model_type whose configs ask for two networks. Gemma 3's
// text configs with use_bidirectional_attention (EmbeddingGemma) describe
// an encoder, the others a decoder; the descriptor of the model_type lists
// the variant, a condition on its parsed config and the descriptor that
// runs such configs, and loading dispatches on it (nn.Arch.Variants). The
// variant's descriptor usually extends the base; it has no variants of
// its own.

// VariantRule is one entry of variants: when the condition holds of a
// config, the descriptor runs runs it.
type VariantRule struct {
	When F[Expr]   `yaml:"when"`
	Runs F[string] `yaml:"runs"`
	Pos  Pos       `yaml:"-"`
}

// Variant is one variants entry, resolved.
type Variant struct {
	When *Value
	Runs string
	pos  Pos
}

// variants resolves the descriptor's variants: a bool condition over the
// config's keys, and a model_type (checked once every descriptor is
// built: checkVariants).
func (b *builder) variants() error {
	sc := b.scope("check")
	for i, r := range b.d.Variants.Items {
		path := fmt.Sprintf("variants[%d]", i)
		if !r.When.IsSet() || !r.Runs.IsSet() || r.Runs.V == "" {
			return errAt(r.Pos, path, "needs when (a condition on the config) and runs (the model_type that runs such configs)")
		}
		v, err := b.value(r.When, path+".when", TBool, sc)
		if err != nil {
			return err
		}
		if r.Runs.V == b.a.Name {
			return errAt(r.Runs.Pos, path+".runs", "runs its own model_type")
		}
		b.a.Variants = append(b.a.Variants, &Variant{When: v, Runs: r.Runs.V, pos: r.Runs.Pos})
	}
	return nil
}

// checkVariants: each variant runs on a descriptor of the set that is no
// wrapper and has no variants itself.
func checkVariants(set *Set) error {
	byName := map[string]*Arch{}
	for _, a := range set.Archs {
		byName[a.Name] = a
	}
	for _, a := range set.Archs {
		for i, v := range a.Variants {
			path := fmt.Sprintf("variants[%d].runs", i)
			t, ok := byName[v.Runs]
			switch {
			case !ok:
				return errAt(v.pos, path, "no descriptor for %q (a wrapper cannot run a variant)", v.Runs)
			case len(t.Variants) > 0:
				return errAt(v.pos, path, "%q has variants of its own", v.Runs)
			}
		}
	}
	return nil
}

// variantsFact is the Arch entry of a's variants:
//
//	Variants: []nn.Variant{{Runs: "embeddinggemma", When: func(cfg any) bool { c := cfg.(*Config); return c.UseBidirectionalAttention }}}
func variantsFact(a *Arch) []kvPair {
	if len(a.Variants) == 0 {
		return nil
	}
	var items []jen.Code
	for _, v := range a.Variants {
		when := jen.Func().Params(jen.Id("cfg").Any()).Bool().Block(
			jen.Id("c").Op(":=").Id("cfg").Assert(jen.Op("*").Id("Config")),
			jen.Return(v.When.Code()),
		)
		items = append(items, jen.Values(jen.Dict{jen.Id("Runs"): jen.Lit(v.Runs), jen.Id("When"): when}))
	}
	return []kvPair{{"Variants", jen.Index().Qual(nnPkg, "Variant").Values(items...)}}
}
