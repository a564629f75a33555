package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// weights.unit_rows: tensors whose rows (or columns) loading scales to
// unit length, w / (‖w‖ + eps) in float32, cast back to their dtype, as
// mlx-lm's sanitize does for Baichuan-M1's head (rows) and Bailing's
// (columns, when norm_head holds); a quantized tensor (its module holding
// .scales) was saved scaled and loads as it is.

// UnitRows is one tensor scaled to unit rows or columns, resolved.
type UnitRows struct {
	Name    string
	Eps     *Value
	Columns bool
	When    *Value // nil: always
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
		u := UnitRows{Name: r.Name.V, Eps: eps}
		switch r.Over.V {
		case "", "rows":
		case "columns":
			u.Columns = true
		default:
			return errAt(r.Over.Pos, path+".over", "unknown %q (want rows or columns)", r.Over.V)
		}
		if r.When.IsSet() {
			if u.When, err = b.value(r.When, path+".when", TBool, sc); err != nil {
				return err
			}
		}
		b.a.UnitRows = append(b.a.UnitRows, u)
	}
	return nil
}

// unitRowsLines are build's lines, after the renames, drops and folds:
// w.UnitRows(name, eps, axis), under `if when` where the rule has one.
func (a *Arch) unitRowsLines() []jen.Code {
	var out []jen.Code
	for _, u := range a.UnitRows {
		axis := -1
		if u.Columns {
			axis = 0
		}
		line := jen.Id("w").Dot("UnitRows").Call(jen.Lit(u.Name), u.Eps.Code(), jen.Lit(axis))
		if u.When != nil && !u.When.IsTrue() {
			line = jen.If(u.When.Code()).Block(line)
		}
		out = append(out, line)
	}
	return out
}
