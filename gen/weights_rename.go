package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// weights.rename: names a checkpoint may hold in another vocabulary,
// rewritten before anything asks for a tensor, as mlx-lm's sanitize
// replaces them (LFM2-MoE's Hugging Face files: w1.weight for
// gate_proj.weight).

// Rename replaces From with To in every tensor name that holds it.
type Rename struct{ From, To string }

// renames resolves weights.rename: both names set, checkpoint names, and
// not the same.
func (b *builder) renames() error {
	for i, r := range b.d.Weights.Rename.Items {
		path := fmt.Sprintf("weights.rename[%d]", i)
		if !r.From.IsSet() || !r.To.IsSet() {
			return errAt(r.Pos, path, "needs from and to")
		}
		for _, x := range []struct {
			f   F[string]
			key string
		}{{r.From, "from"}, {r.To, "to"}} {
			if !checkpointName.MatchString(x.f.V) {
				return errAt(x.f.Pos, path+"."+x.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", x.f.V)
			}
		}
		if r.From.V == r.To.V {
			return errAt(r.To.Pos, path+".to", "renames %q to itself", r.From.V)
		}
		b.a.Renames = append(b.a.Renames, Rename{From: r.From.V, To: r.To.V})
	}
	return nil
}

// renameLines are build's first lines: w.Rename(from, to), in order.
func (a *Arch) renameLines() []jen.Code {
	var out []jen.Code
	for _, r := range a.Renames {
		out = append(out, jen.Id("w").Dot("Rename").Call(jen.Lit(r.From), jen.Lit(r.To)))
	}
	return out
}
