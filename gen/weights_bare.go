package gen

import (
	"github.com/dave/jennifer/jen"
)

// weights.bare: a checkpoint whose tensor names lack the model's prefix
// (Hugging Face's GPT-2 files: h.0.attn.c_attn.weight) is read under it,
// the named Conv1D weights ([in, out]) transposed to the [out, in] of a
// linear layer, as mlx-lm's sanitize reads such files. A checkpoint whose
// names hold the prefix (mlx-lm's own saved files) loads as it is.

// bareLines are build's first lines: w.PrefixBare(prefix, suffixes), when
// the descriptor reads bare checkpoints.
func (a *Arch) bareLines() []jen.Code {
	if a.Bare == nil {
		return nil
	}
	var suffixes []jen.Code
	for _, s := range a.Bare {
		suffixes = append(suffixes, jen.Lit(s))
	}
	return []jen.Code{jen.Id("w").Dot("PrefixBare").Call(jen.Lit(a.Names.Model), jen.Index().String().Values(suffixes...))}
}

// bare resolves weights.bare: checkpoint name suffixes, under a model
// prefix.
func (b *builder) bare() error {
	f := b.d.Weights.Bare
	if !f.IsSet() {
		return nil
	}
	if b.a.Names.Model == "" {
		return errAt(f.Pos, "weights.bare", "reads checkpoints without the model's prefix, and weights.names.model is empty")
	}
	b.a.Bare = []string{}
	for _, s := range f.V {
		if !checkpointName.MatchString(s) {
			return errAt(f.Pos, "weights.bare", "%q is not a checkpoint name (dotted names of letters, digits and _)", s)
		}
		b.a.Bare = append(b.a.Bare, s)
	}
	return nil
}
