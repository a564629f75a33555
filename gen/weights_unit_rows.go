package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// weights.unit_rows: tensors whose rows loading scales to unit length,
// w / (‖w‖ + eps) in float32, cast back to their dtype, as mlx-lm's
// sanitize does for Baichuan-M1's head; a quantized tensor (its module
// holding .scales) was saved scaled and loads as it is.

// UnitRows is one tensor scaled to unit rows, resolved.
type UnitRows struct {
	Name string
	Eps  *Value
}

// unitRows resolves weights.unit_rows: a checkpoint name ending in
// .weight and an eps each.
func (b *builder) unitRows() error {
	sc := b.scope("load")
	for i, r := range b.d.Weights.UnitRows.Items {
		path := fmt.Sprintf("weights.unit_rows[%d]", i)
		if !r.Name.IsSet() || !r.Eps.IsSet() {
			return errAt(r.Pos, path, "needs name and eps")
		}
		if !checkpointName.MatchString(r.Name.V) || !strings.HasSuffix(r.Name.V, ".weight") {
			return errAt(r.Name.Pos, path+".name", "%q is not a checkpoint tensor name ending in .weight", r.Name.V)
		}
		eps, err := b.value(r.Eps, path+".eps", TFloat, sc)
		if err != nil {
			return err
		}
		b.a.UnitRows = append(b.a.UnitRows, UnitRows{Name: r.Name.V, Eps: eps})
	}
	return nil
}

// unitRowsLines are build's lines, after the renames, drops and folds:
// w.UnitRows(name, eps).
func (a *Arch) unitRowsLines() []jen.Code {
	var out []jen.Code
	for _, u := range a.UnitRows {
		out = append(out, jen.Id("w").Dot("UnitRows").Call(jen.Lit(u.Name), u.Eps.Code()))
	}
	return out
}
