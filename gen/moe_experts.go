package gen

import "github.com/dave/jennifer/jen"

// The sparse block's experts and router options: a router with a bias (a linear with
// one, router_bias); the experts' activation: SwiGLU, or the clamped
// SwiGLU (act: clamped_swiglu), (clip(up, -limit, limit) + 1) * g *
// sigmoid(alpha * g) with g = min(gate, limit); and a published layout
// whose experts hold gate and up fused with interleaved rows, in mxfp4
// blocks (weights.experts.interleaved_gate_up).

// ExpertActKind is how a gated expert combines its gate and up halves.
type ExpertActKind string

func (ExpertActKind) values() []string {
	return []string{"swiglu", "clamped_swiglu", "relu2", "geglu", "gelu_tanh"}
}

// ungated: the experts (and a shared expert) have no gate projection:
// down(relu(up(x))²), or down(gelu(up(x))) with the tanh-approximate GELU.
func (m *MoE) ungated() bool { return m.Act == "relu2" || m.Act == "gelu_tanh" }

// moeActDefaults fills the added parts' defaults.
func moeActDefaults(d *Descriptor) {
	m, f := &d.Structure.MoE, d.file
	exprDefault(&m.RouterBias, "false", f)
	setDefault(&m.Act, ExpertActKind("swiglu"), f)
}

// buildMoEAct resolves them into m.
func (b *builder) buildMoEAct(m *MoE, sc *scope) error {
	s := &b.d.Structure.MoE
	var err error
	if m.RouterBias, err = b.value(s.RouterBias, "structure.moe.router_bias", TBool, sc); err != nil {
		return err
	}
	if m.Matrix && !m.RouterBias.IsFalse() {
		return errAt(s.RouterBias.Pos, "structure.moe.router_bias", "a router_matrix router is a bare weight, with no bias")
	}
	m.Act = s.Act.V
	if m.Act != "clamped_swiglu" {
		for _, x := range []struct {
			f   F[Expr]
			key string
		}{{s.Alpha, "alpha"}, {s.Limit, "limit"}} {
			if x.f.IsSet() {
				return errAt(x.f.Pos, "structure.moe."+x.key, "alpha and limit belong to the clamped_swiglu activation (act is %s)", m.Act)
			}
		}
		return nil
	}
	for _, x := range []struct {
		f   F[Expr]
		key string
		dst **Value
	}{{s.Alpha, "alpha", &m.Alpha}, {s.Limit, "limit", &m.Limit}} {
		if !x.f.IsSet() {
			return errAt(s.Act.Pos, "structure.moe."+x.key, "the clamped_swiglu activation needs %s", x.key)
		}
		if *x.dst, err = b.value(x.f, "structure.moe."+x.key, TFloat, sc); err != nil {
			return err
		}
	}
	return nil
}

// actFields adds the activation's fields to the SwitchGLU literal.
func (m *MoE) actFields(glu jen.Dict) {
	if m.Act == "gelu_tanh" {
		glu[jen.Id("Act")] = jen.Qual(nnPkg, "ActGELUTanh")
		return
	}
	if m.ungated() {
		glu[jen.Id("Act")] = jen.Qual(nnPkg, "ActReLU2")
		return
	}
	if m.Act == "geglu" {
		glu[jen.Id("Act")] = jen.Qual(nnPkg, "ActGeGLU")
		return
	}
	if m.Act != "clamped_swiglu" {
		return
	}
	glu[jen.Id("Act")] = jen.Qual(nnPkg, "ActClampedSwiGLU")
	glu[jen.Id("Alpha")] = m.Alpha.Code()
	glu[jen.Id("Limit")] = m.Limit.Code()
}

// actDoc names the experts' activation for the block's doc.
func (m *MoE) actDoc() string {
	switch m.Act {
	case "clamped_swiglu":
		return "clamped SwiGLU"
	case "relu2":
		return "relu² (ungated)"
	case "geglu":
		return "GeGLU (tanh-approximate GELU)"
	case "gelu_tanh":
		return "GELU (tanh-approximate, ungated)"
	}
	return "SwiGLU"
}

// checkInterleaved resolves weights.experts.interleaved_gate_up.
func (m *MoE) checkInterleaved(n ExpertNames) error {
	f := n.InterleavedGateUp
	if !f.IsSet() {
		return nil
	}
	const path = "weights.experts.interleaved_gate_up"
	if !checkpointName.MatchString(f.V) {
		return errAt(f.Pos, path, "%q is not a checkpoint name (dotted names of letters, digits and _)", f.V)
	}
	if m.fusedGateUp != "" {
		return errAt(f.Pos, path, "the experts' gate and up are fused once: fused_gate_up or interleaved_gate_up, not both")
	}
	m.interleaved = f.V
	return nil
}

// uninterleave are build's lines reading the interleaved layout.
func (m *MoE) uninterleave(path func(string) string) []jen.Code {
	if m.interleaved == "" {
		return nil
	}
	return []jen.Code{jen.Id("lw").Dot("UninterleaveExperts").Call(jen.Lit(path(m.stacked)), jen.Lit(m.interleaved),
		jen.Lit(m.projs[0]), jen.Lit(m.projs[1]), jen.Lit(m.projs[2]))}
}
