package gen

import (
	"strings"

	"github.com/dave/jennifer/jen"
)

// weights.norm_shift: checkpoints that store some norms' weights centred
// on zero (Hugging Face's Qwen3-Next and Qwen3.5 files) have a constant
// added to them when loading, as mlx-lm's sanitize does, but only when the
// checkpoint is in that form: when some tensor's name ends with
// when_suffix (and, with last_dim_not, its last axis is not that size).
// mlx-lm's own saved checkpoints are already shifted.

// NormShiftDesc is weights.norm_shift.
type NormShiftDesc struct {
	Add        F[float64]  `yaml:"add"`
	Norms      F[[]string] `yaml:"norms"`
	WhenSuffix F[string]   `yaml:"when_suffix"`
	LastDimNot F[int64]    `yaml:"last_dim_not"`
	Pos        Pos         `yaml:"-"`
}

// NormShift is weights.norm_shift, resolved.
type NormShift struct {
	Add        float64
	Norms      []string
	WhenSuffix string
	LastDimNot int
}

// resolveNormShift checks weights.norm_shift: add, norms and when_suffix
// go together.
func (b *builder) resolveNormShift() error {
	s := &b.d.Weights.NormShift
	if !s.Add.IsSet() && !s.Norms.IsSet() && !s.WhenSuffix.IsSet() && !s.LastDimNot.IsSet() {
		return nil
	}
	if !s.Add.IsSet() || !s.Norms.IsSet() || !s.WhenSuffix.IsSet() {
		return errAt(s.Pos, "weights.norm_shift", "add, norms and when_suffix go together")
	}
	for i, n := range s.Norms.V {
		if n == "" || strings.ContainsAny(n, " \t") {
			return errAt(s.Norms.Pos, "weights.norm_shift.norms", "entry %d, %q, is not the end of a checkpoint name", i, n)
		}
	}
	b.a.NormShift = &NormShift{Add: s.Add.V, Norms: s.Norms.V, WhenSuffix: s.WhenSuffix.V, LastDimNot: int(s.LastDimNot.V)}
	return nil
}

// load spells the shift, a line of build before anything reads the norms:
//
//	w.ShiftNorms(1, []string{".input_layernorm.weight", ...}, ".mlp.experts.0.up_proj.weight", 0)
func (s *NormShift) load() jen.Code {
	return jen.Id("w").Dot("ShiftNorms").Call(jen.Lit(s.Add), strList(s.Norms), jen.Lit(s.WhenSuffix), jen.Lit(s.LastDimNot))
}
