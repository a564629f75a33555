package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// The mixture of experts: a sparse feed-forward block. A router (a linear
// to one logit per expert) picks k experts for each token and weighs
// them; the experts are gated MLPs whose weights are stacked [E, out, in]
// and run by gathered matmuls. Which layers are sparse is a per-layer
// expression decided at load: the others run the dense MLP of
// structure.mlp, so one model holds both. The routing itself (router
// kinds, the sorted path) is runtime/nn's MoE, configured from here.

// MoEDesc is structure.moe: absent (no experts) unless experts is set.
type MoEDesc struct {
	Experts F[Expr]       `yaml:"experts"` // E
	TopK    F[Expr]       `yaml:"top_k"`   // k
	Hidden  F[Expr]       `yaml:"hidden"`  // each expert's inner width
	Sparse  F[Expr]       `yaml:"sparse"`  // per layer; default every layer
	Router  F[RouterKind] `yaml:"router"`
	Renorm  F[Expr]       `yaml:"renorm"`   // softmax_topk: the k weights renormalised
	TopLast F[bool]       `yaml:"top_last"` // which of mlx-lm's two top-k spellings
	Bias    F[Expr]       `yaml:"bias"`     // expert biases
	// Shared is the shared expert's inner width (none: no shared
	// expert); SharedGate puts a sigmoid gate (a linear to one) on it.
	Shared     F[Expr] `yaml:"shared"`
	SharedGate F[bool] `yaml:"shared_gate"`
	// Float32: topk_softmax's softmax in float32 (the weighted sum is
	// cast back).
	Float32 F[bool] `yaml:"float32"`
	// Matrix: the router is a bare weight, never quantized.
	Matrix F[bool] `yaml:"router_matrix"`
	// sigmoid_group: the groups, how many of them are kept, and the
	// routed scaling factor.
	Groups     F[Expr] `yaml:"groups"`
	TopKGroups F[Expr] `yaml:"topk_groups"`
	Scale      F[Expr] `yaml:"scale"` // sigmoid_topk's too
	// Correction: whether a corrected router's correction bias is there
	// (a bool expression; default true).
	Correction F[Expr] `yaml:"correction"`
	// Sigmoid: score_topk_norm scores by a sigmoid, not a softmax.
	Sigmoid F[Expr] `yaml:"sigmoid"`
	// RenormEps: sigmoid_group's and score_group's renormalisation divides by the sum plus
	// this (a float expression; default 0, none).
	RenormEps F[Expr] `yaml:"renorm_eps"`
	// The router's bias, and the experts' activation (moe_experts.go).
	RouterBias F[Expr]          `yaml:"router_bias"`
	Act        F[ExpertActKind] `yaml:"act"`
	Alpha      F[Expr]          `yaml:"alpha"`
	Limit      F[Expr]          `yaml:"limit"`
	// Jitter: sparsemixer's band around each round's pick.
	Jitter F[Expr] `yaml:"jitter"`
	// Softcap and SqrtSoftplus: float32_score_norm's logit cap (a float
	// expression; 0: none) and score function (a bool expression).
	Softcap      F[Expr] `yaml:"softcap"`
	SqrtSoftplus F[Expr] `yaml:"sqrt_softplus"`
	// Precise: topk_softmax's softmax accumulates in float32 (default
	// true; false: in the logits' dtype).
	Precise F[bool] `yaml:"precise"`
	// The router's input norm, its per-expert scale, and experts that run
	// beside the dense MLP (moe_beside.go).
	RouterNorm  F[Expr] `yaml:"router_norm"`
	ExpertScale F[bool] `yaml:"expert_scale"`
	Beside      F[bool] `yaml:"beside_dense"`
}

// ExpertNames is weights.experts: the checkpoint's names of the sparse
// block's parts under the MLP, and the Hugging Face per-expert layout
// loading stacks.
type ExpertNames struct {
	Router     F[string] `yaml:"router"`     // the router's linear
	Stacked    F[string] `yaml:"stacked"`    // the stacked experts (mlx-lm's layout)
	PerExpert  F[string] `yaml:"per_expert"` // <per_expert>.<e>.<proj> in Hugging Face's
	Gate       F[string] `yaml:"gate"`       // each expert's projections there
	Up         F[string] `yaml:"up"`
	Down       F[string] `yaml:"down"`
	Shared     F[string] `yaml:"shared"`      // the shared expert (a SwiGLU)
	SharedGate F[string] `yaml:"shared_gate"` // its gate
	Correction F[string] `yaml:"correction"`  // the routers' correction bias, under the router
	// CorrectionIn is the module the correction bias is under: the
	// router (default) or the MLP.
	CorrectionIn F[string] `yaml:"correction_in"`
	// CorrectionFrom is where a checkpoint may hold that bias instead,
	// directly under the MLP; loading moves it to where correction_in
	// says.
	CorrectionFrom F[string] `yaml:"correction_from"`
	// FusedGateUp and FusedDown name a layout whose experts are stacked
	// already, gate and up fused in one [E, 2 * hidden, D] tensor.
	FusedGateUp F[string] `yaml:"fused_gate_up"`
	FusedDown   F[string] `yaml:"fused_down"`
	// TransposedGateUp and TransposedDown name a layout whose experts are
	// stacked with each matrix's axes swapped: gate and up fused in one
	// [E, D, 2 * hidden] tensor (gate columns first), down [E, hidden, D]
	// (transformers' Qwen3-VL-MoE files); read where a checkpoint holds
	// them.
	TransposedGateUp F[string] `yaml:"transposed_gate_up"`
	TransposedDown   F[string] `yaml:"transposed_down"`
	// InterleavedGateUp names, under the stacked experts, gate and up
	// fused with their rows interleaved, in mxfp4 blocks (moe_experts.go).
	InterleavedGateUp F[string] `yaml:"interleaved_gate_up"`
	// Dense is the dense layers' module, when it is not the MLP's own
	// name (the sparse layers'); default the MLP's.
	Dense F[string] `yaml:"dense"`
	// SharedIn is the module the shared expert is under: the MLP
	// (default) or the layer, beside the MLP.
	SharedIn F[string] `yaml:"shared_in"`
	// SharedFused: the shared expert's gate and up are one projection,
	// <shared>.<fused_gate_up> [2 * shared, D] (gate rows first), and its
	// down is <shared>.<fused_down>.
	SharedFused F[bool] `yaml:"shared_fused"`
	// StackedUp and StackedDown name the stacked experts' up and down
	// projections where they differ from the MLP's names (Nemotron-H's
	// fc1 and fc2 beside per-expert up_proj and down_proj).
	StackedUp   F[string] `yaml:"stacked_up"`
	StackedDown F[string] `yaml:"stacked_down"`
	// DenseFromShared: a checkpoint may store each dense layer's MLP as a
	// shared expert (fused, at its place); loading moves it to the dense
	// names, its gate and up split.
	DenseFromShared F[bool] `yaml:"dense_from_shared"`
	// At is the module the router and the experts are under: the MLP
	// (default) or the layer (moe_beside.go).
	At F[string] `yaml:"at"`
	// RouterScale and ExpertScale name the router norm's learned scale
	// and the per-expert scale; DenseNorm, InNorm and OutNorm the norms of
	// experts beside the dense MLP, under the layer (moe_beside.go).
	RouterScale F[string] `yaml:"router_scale"`
	ExpertScale F[string] `yaml:"expert_scale"`
	DenseNorm   F[string] `yaml:"dense_norm"`
	InNorm      F[string] `yaml:"in_norm"`
	OutNorm     F[string] `yaml:"out_norm"`
}

// RouterKind is how the router turns logits into k experts and weights.
type RouterKind string

// routerKinds are the router kinds and runtime/nn's constant for each.
var routerKinds = []struct {
	kind  RouterKind
	nn    string
	doc   string
	needs []string
}{
	{"softmax_topk", "RouteSoftmaxTopK", "a softmax over the experts, then the k most probable (renormalised when renorm holds)", nil},
	{"topk_softmax", "RouteTopKSoftmax", "the k largest logits, then a softmax over them", nil},
	{"score_topk_norm", "RouteScoreTopKNorm", "a softmax or a sigmoid over the experts in float32, then the k highest, divided by their sum", nil},
	{"sigmoid_group", "RouteSigmoidGroup", "sigmoid scores; the k best after a correction bias, within the best groups of experts, weighted by their scores times a scaling factor", nil},
	{"sigmoid_bias_norm", "RouteSigmoidBias", "sigmoid scores of the input in float32; the k best after a correction bias, weighted by their scores over their sum in the input's dtype", nil},
	{"sparsemixer", "RouteSparseMixer", "k rounds of the largest logit not yet picked, each weighted by a softmax over the logits within the jitter band of it", nil},
	{"sigmoid_topk", "RouteSigmoidTopK", "sigmoid scores; the k best (after a correction bias where there is one), weighted by their scores (renormalised when renorm holds) times a scaling factor", nil},
	{"score_group", "RouteScoreGroup", "a softmax or a sigmoid over the experts in float32; the k best (after a correction bias where there is one) within the best groups of experts, weighted by their scores (renormalised when renorm holds) times a scaling factor, in the input's dtype", nil},
	{"softmax_group_max", "RouteSoftmaxGroupMax", "a softmax over the experts; the k most probable within the groups whose best probability is highest, weighted by their probabilities times a scaling factor", nil},
	{"float32_score_norm", "RouteFloat32ScoreNorm", "float32 logits, soft-capped where a cap is set, scored by a sigmoid or sqrt(softplus); the k best after a correction bias, weighted by their scores over their sum in float32, the weighted sum times a scaling factor", nil},
}

func (RouterKind) values() []string {
	var out []string
	for _, k := range routerKinds {
		out = append(out, string(k.kind))
	}
	return out
}

// moeDefaults fills structure.moe and weights.experts where the
// descriptor has experts.
func moeDefaults(d *Descriptor) {
	m, f := &d.Structure.MoE, d.file
	if !m.Experts.IsSet() {
		return
	}
	exprDefault(&m.Sparse, "true", f)
	setDefault(&m.Router, RouterKind("softmax_topk"), f)
	exprDefault(&m.Renorm, "false", f)
	setDefault(&m.TopLast, false, f)
	exprDefault(&m.Bias, "false", f)
	moeActDefaults(d)
	n := &d.Weights.Experts
	setDefault(&n.Router, "gate", f)
	setDefault(&n.Stacked, "switch_mlp", f)
	setDefault(&n.PerExpert, "experts", f)
	names := &d.Weights.Names
	setDefault(&n.Gate, names.Gate.V, f)
	setDefault(&n.Up, names.Up.V, f)
	setDefault(&n.Down, names.Down.V, f)
	setDefault(&m.SharedGate, false, f)
	setDefault(&n.Shared, "shared_expert", f)
	setDefault(&n.SharedGate, "shared_expert_gate", f)
	setDefault(&n.Correction, "e_score_correction_bias", f)
	setDefault(&n.CorrectionIn, "router", f)
	setDefault(&n.Dense, names.MLP.V, f)
	setDefault(&n.StackedUp, names.Up.V, f)
	setDefault(&n.StackedDown, names.Down.V, f)
	setDefault(&n.SharedIn, "mlp", f)
	setDefault(&n.SharedFused, false, f)
	setDefault(&n.DenseFromShared, false, f)
	setDefault(&m.Float32, false, f)
	setDefault(&m.Matrix, false, f)
	if m.Router.V == "score_topk_norm" || m.Router.V == "score_group" {
		exprDefault(&m.Sigmoid, "false", f)
	}
	if m.Router.V.grouped() {
		exprDefault(&m.Groups, "1", f)
		exprDefault(&m.TopKGroups, "1", f)
	}
	if m.Router.V.grouped() || m.Router.V == "sigmoid_topk" || m.Router.V == "float32_score_norm" {
		exprDefault(&m.Scale, "1.0", f)
	}
	if m.Router.V == "float32_score_norm" {
		exprDefault(&m.Softcap, "0.0", f)
		exprDefault(&m.SqrtSoftplus, "false", f)
	}
	if m.Router.V.corrected() {
		exprDefault(&m.Correction, "true", f)
	}
	besideDefaults(d)
}

// MoE is the sparse block, resolved.
type MoE struct {
	Experts, TopK, Hidden *Value
	Sparse                *Value // per layer
	Router                RouterKind
	Renorm                *Value
	Correction            *Value // a corrected router's bias is there (nil: no such router)
	TopLast               bool
	Bias                  *Value
	Shared                *Value // nil: no shared expert
	SharedGate            bool
	Float32, Matrix       bool
	Groups, TopKGroups    *Value // sigmoid_group
	Scale                 *Value
	Sigmoid               *Value // score_topk_norm
	RenormEps             *Value // sigmoid_group, score_group; nil: none
	Jitter                *Value // sparsemixer
	Softcap, SqrtSoftplus *Value // float32_score_norm
	RouterBias            *Value
	Act                   ExpertActKind
	Alpha, Limit          *Value // clamped_swiglu
	Imprecise             bool   // topk_softmax's softmax in the logits' dtype
	// RouterNorm is the factor of the router's input norm (nil: none);
	// ExpertScale weighs each picked expert by a learned scale; Beside
	// runs the experts beside the dense MLP (nil: instead of it); atLayer
	// puts the router and experts under the layer (moe_beside.go).
	RouterNorm                       *Value
	ExpertScale                      bool
	Beside                           *ExpertsBeside
	atLayer                          bool
	routerScaleName, expertScaleName string
	routerNormEps                    *Value // the router norm's eps: the architecture's norms'
	interleaved                      string
	correction                       string // its path under the MLP
	correctionFrom                   string
	fusedGateUp, fusedDown           string
	// transposedGateUp, transposedDown: weights.experts' transposed layout.
	transposedGateUp, transposedDown string
	// stackedProjs are the projections' names in the stacked layout
	// (stacked_up, stacked_down; the MLP's names by default).
	stackedProjs [3]string
	// dense is the dense layers' module; sharedAtLayer puts the shared
	// expert under the layer; sharedFused and denseFromShared are
	// ExpertNames'.
	dense                                       string
	sharedAtLayer, sharedFused, denseFromShared bool

	sharedName, sharedGateName     string
	sharedField, sharedGateField   *field
	routerName, stacked, perExpert string
	projs                          [3]string // the stacked experts' gate, up, down
	hfProjs                        [3]string // the per-expert ones
	routerField, expertsField      *field
	run, moe                       *field
	mlp                            *MLP
}

// buildMoE resolves structure.moe; nil when the descriptor has none.
func (b *builder) buildMoE(sc *scope) (*MoE, error) {
	s := &b.d.Structure.MoE
	if !s.Experts.IsSet() {
		return nil, nil
	}
	var err error
	must := func(f F[Expr], path string, t Type) *Value {
		if err != nil {
			return nil
		}
		var v *Value
		v, err = b.value(f, path, t, sc)
		return v
	}
	m := &MoE{
		Experts: must(s.Experts, "structure.moe.experts", TInt),
		TopK:    must(s.TopK, "structure.moe.top_k", TInt),
		Hidden:  must(s.Hidden, "structure.moe.hidden", TInt),
		Router:  s.Router.V,
		Renorm:  must(s.Renorm, "structure.moe.renorm", TBool),
		TopLast: s.TopLast.V,
		Bias:    must(s.Bias, "structure.moe.bias", TBool),
	}
	m.Float32, m.Matrix = s.Float32.V, s.Matrix.V
	if m.Router == "softmax_group_max" && !m.Renorm.IsFalse() {
		return nil, errAt(s.Renorm.Pos, "structure.moe.renorm", "a softmax_group_max router never renormalises its weights")
	}
	if m.Float32 && m.Router != "topk_softmax" {
		return nil, errAt(s.Float32.Pos, "structure.moe.float32", "only a topk_softmax router has a float32 softmax")
	}
	groups := []struct {
		f   F[Expr]
		key string
	}{{s.Groups, "groups"}, {s.TopKGroups, "topk_groups"}, {s.Scale, "scale"}}
	switch m.Router {
	case "sigmoid_group", "score_group", "softmax_group_max":
		m.Groups = must(s.Groups, "structure.moe.groups", TInt)
		m.TopKGroups = must(s.TopKGroups, "structure.moe.topk_groups", TInt)
		m.Scale = must(s.Scale, "structure.moe.scale", TFloat)
	case "sigmoid_topk", "float32_score_norm":
		m.Scale = must(s.Scale, "structure.moe.scale", TFloat)
		groups = groups[:2]
		fallthrough
	default:
		for _, x := range groups {
			if x.f.IsSet() {
				return nil, errAt(x.f.Pos, "structure.moe."+x.key, "groups and topk_groups belong to a sigmoid_group, score_group or softmax_group_max router, scale to them, sigmoid_topk and float32_score_norm")
			}
		}
	}
	if m.Router.corrected() {
		m.Correction = must(s.Correction, "structure.moe.correction", TBool)
	} else if s.Correction.IsSet() {
		return nil, errAt(s.Correction.Pos, "structure.moe.correction", "only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias")
	}
	if m.Router == "score_topk_norm" || m.Router == "score_group" {
		m.Sigmoid = must(s.Sigmoid, "structure.moe.sigmoid", TBool)
	} else if s.Sigmoid.IsSet() {
		return nil, errAt(s.Sigmoid.Pos, "structure.moe.sigmoid", "only a score_topk_norm or score_group router chooses between a softmax and a sigmoid")
	}
	if s.RenormEps.IsSet() {
		if m.Router != "score_group" && m.Router != "sigmoid_group" {
			return nil, errAt(s.RenormEps.Pos, "structure.moe.renorm_eps", "only a sigmoid_group or score_group router adds an eps to its renormalisation")
		}
		m.RenormEps = must(s.RenormEps, "structure.moe.renorm_eps", TFloat)
	}
	if m.Router == "float32_score_norm" {
		m.Softcap = must(s.Softcap, "structure.moe.softcap", TFloat)
		m.SqrtSoftplus = must(s.SqrtSoftplus, "structure.moe.sqrt_softplus", TBool)
	} else {
		for _, x := range []struct {
			f   F[Expr]
			key string
		}{{s.Softcap, "softcap"}, {s.SqrtSoftplus, "sqrt_softplus"}} {
			if x.f.IsSet() {
				return nil, errAt(x.f.Pos, "structure.moe."+x.key, "only a float32_score_norm router caps its logits or scores by sqrt(softplus)")
			}
		}
	}
	if m.Router == "sparsemixer" {
		if !s.Jitter.IsSet() {
			return nil, errAt(s.Router.Pos, "structure.moe.jitter", "a sparsemixer router needs jitter")
		}
		m.Jitter = must(s.Jitter, "structure.moe.jitter", TFloat)
	} else if s.Jitter.IsSet() {
		return nil, errAt(s.Jitter.Pos, "structure.moe.jitter", "only a sparsemixer router has a jitter")
	}
	if s.Shared.IsSet() {
		m.Shared = must(s.Shared, "structure.moe.shared", TInt)
		m.SharedGate = s.SharedGate.V
	} else if s.SharedGate.V {
		return nil, errAt(s.SharedGate.Pos, "structure.moe.shared_gate", "there is no shared expert to gate")
	}
	if err == nil {
		err = b.buildMoEAct(m, sc)
	}
	if err == nil {
		err = b.buildBeside(m, sc)
	}
	if err != nil {
		return nil, err
	}
	pl := *sc
	pl.perLayer = true
	if m.Sparse, err = b.value(s.Sparse, "structure.moe.sparse", TBool, &pl); err != nil {
		return nil, err
	}
	n := b.d.Weights.Experts
	for _, x := range []struct {
		f   F[string]
		key string
	}{{n.Router, "router"}, {n.Stacked, "stacked"}, {n.PerExpert, "per_expert"}, {n.Gate, "gate"}, {n.Up, "up"}, {n.Down, "down"},
		{n.Shared, "shared"}, {n.SharedGate, "shared_gate"}, {n.Correction, "correction"}, {n.FusedGateUp, "fused_gate_up"}, {n.FusedDown, "fused_down"},
		{n.TransposedGateUp, "transposed_gate_up"}, {n.TransposedDown, "transposed_down"},
		{n.CorrectionFrom, "correction_from"}, {n.Dense, "dense"}} {
		if x.f.IsSet() && !checkpointName.MatchString(x.f.V) {
			return nil, errAt(x.f.Pos, "weights.experts."+x.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", x.f.V)
		}
	}
	m.routerName, m.stacked, m.perExpert = n.Router.V, n.Stacked.V, n.PerExpert.V
	names := b.d.Weights.Names
	m.projs = [3]string{names.Gate.V, names.Up.V, names.Down.V}
	m.stackedProjs = [3]string{names.Gate.V, n.StackedUp.V, n.StackedDown.V}
	for _, x := range []struct {
		f   F[string]
		key string
	}{{n.StackedUp, "stacked_up"}, {n.StackedDown, "stacked_down"}} {
		if x.f.IsSet() && !checkpointName.MatchString(x.f.V) {
			return nil, errAt(x.f.Pos, "weights.experts."+x.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", x.f.V)
		}
	}
	if m.ungated() && (n.FusedGateUp.IsSet() || n.InterleavedGateUp.IsSet() || m.SharedGate) {
		return nil, errAt(s.Act.Pos, "structure.moe.act", "%s experts are ungated: no fused or interleaved gate, and no shared expert gate", m.Act)
	}
	if m.Act == "gelu_tanh" && m.Shared != nil {
		return nil, errAt(s.Act.Pos, "structure.moe.act", "gelu_tanh experts take no shared expert (a shared expert is a SwiGLU, or relu2 beside relu2 experts)")
	}
	m.hfProjs = [3]string{n.Gate.V, n.Up.V, n.Down.V}
	m.routerField = newField(goName(m.routerName), nnType("Linear"), m.routerName+": the router (sparse layers)")
	m.expertsField = newField(goName(m.stacked), nnType("SwitchGLU"), m.stacked+": the experts, stacked (sparse layers)")
	m.sharedName, m.sharedGateName = n.Shared.V, n.SharedGate.V
	if m.correction, err = correctionPath(n, m.Router); err != nil {
		return nil, err
	}
	if n.CorrectionFrom.IsSet() && !m.Router.corrected() {
		return nil, errAt(n.CorrectionFrom.Pos, "weights.experts.correction_from", "only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias")
	}
	m.correctionFrom = n.CorrectionFrom.V
	if err := together(n.FusedGateUp, n.FusedDown, "fused_gate_up", "fused_down"); err != nil {
		return nil, err
	}
	m.fusedGateUp, m.fusedDown = n.FusedGateUp.V, n.FusedDown.V
	if err := together(n.TransposedGateUp, n.TransposedDown, "transposed_gate_up", "transposed_down"); err != nil {
		return nil, err
	}
	if n.TransposedGateUp.IsSet() && m.ungated() {
		return nil, errAt(n.TransposedGateUp.Pos, "weights.experts.transposed_gate_up", "the experts have no gate to fuse with up")
	}
	m.transposedGateUp, m.transposedDown = n.TransposedGateUp.V, n.TransposedDown.V
	m.dense = n.Dense.V
	switch n.SharedIn.V {
	case "mlp":
	case "layer":
		m.sharedAtLayer = true
	default:
		return nil, errAt(n.SharedIn.Pos, "weights.experts.shared_in", "unknown %q (want mlp or layer)", n.SharedIn.V)
	}
	m.sharedFused, m.denseFromShared = n.SharedFused.V, n.DenseFromShared.V
	for _, x := range []struct {
		f   F[bool]
		key string
	}{{n.SharedFused, "shared_fused"}, {n.DenseFromShared, "dense_from_shared"}} {
		switch {
		case !x.f.V:
		case m.Shared == nil:
			return nil, errAt(x.f.Pos, "weights.experts."+x.key, "there is no shared expert (structure.moe.shared)")
		case m.fusedGateUp == "":
			return nil, errAt(x.f.Pos, "weights.experts."+x.key, "the fused names come from fused_gate_up and fused_down, which are not set")
		}
	}
	if m.denseFromShared && !m.sharedFused {
		return nil, errAt(n.DenseFromShared.Pos, "weights.experts.dense_from_shared", "needs shared_fused: the dense layers' stored form is the fused shared expert's")
	}
	if err := m.checkInterleaved(n); err != nil {
		return nil, err
	}
	m.sharedField = newField(goName(m.sharedName), nnType("GLU"), m.sharedName+": the shared expert (sparse layers)")
	m.sharedGateField = newField(goName(m.sharedGateName), nnType("Linear"), m.sharedGateName+": its gate")
	m.moe = newField("MoE", func() *jen.Statement { return jen.Qual(nnPkg, "MoE") }, "the router and experts, wired (sparse layers)")
	m.run = newField("run", func() *jen.Statement {
		return jen.Func().Params(jen.Op("*").Qual(mlxPkg, "Graph"), arrayType()).Add(arrayType())
	}, "dense or sparse, chosen at load")
	return m, nil
}

// sharedPath is the shared expert's module: under the MLP's (scope), or
// beside it, under the layer.
func (m *MoE) sharedPath(scope string) string {
	if m.sharedAtLayer {
		return m.sharedName
	}
	return scope + "." + m.sharedName
}

// allSparse: every layer is sparse, and the MLP has no dense form.
func (m *MoE) allSparse() bool { return m.Sparse.IsTrue() }

func (m *MoE) fields() []jen.Code {
	out := []jen.Code{m.routerField.decl(), m.expertsField.decl()}
	if m.Shared != nil {
		out = append(out, m.sharedField.decl())
		if m.SharedGate {
			out = append(out, m.sharedGateField.decl())
		}
	}
	out = append(out, jen.Line(), m.moe.decl())
	if !m.allSparse() {
		out = append(out, m.run.decl())
	}
	return out
}

// build are the sparse layer's lines: stack a per-expert checkpoint,
// load the router and the experts, wire them.
func (m *MoE) build(scope string) []jen.Code {
	// the model routes: its default caches hold what it computes
	out, late := []jen.Code{jen.Id("lw").Dot("Routes").Call()}, []jen.Code(nil)
	hidden := fHidden.of(rModel)
	path := func(x string) string { return m.under(scope, x) }
	stacked := func(i int) jen.Code { return jen.Lit(path(m.stacked + "." + m.stackedProjs[i])) }
	for _, u := range []struct{ method, gateUp, down string }{
		{"UnfuseExperts", m.fusedGateUp, m.fusedDown},
		{"UnfuseExpertsTransposed", m.transposedGateUp, m.transposedDown},
	} {
		if u.gateUp != "" {
			out = append(out,
				jen.Id("lw").Dot(u.method).Call(jen.Lit(path(u.gateUp)), stacked(0), stacked(1)),
				jen.Id("lw").Dot(u.method).Call(jen.Lit(path(u.down)), stacked(2)))
		}
	}
	out = append(out, m.uninterleave(path)...)
	for i, p := range m.stackedProjs {
		if i == 0 && m.ungated() {
			continue
		}
		out = append(out, jen.Id("lw").Dot("StackExperts").Call(
			jen.Lit(path(m.stacked+"."+p)),
			jen.Qual(nnPkg, "ExpertName").Call(jen.Lit(path(m.perExpert)), jen.Lit(m.hfProjs[i])),
			m.Experts.Code()))
	}
	if m.Matrix {
		out = append(out, m.routerField.of(rMLP).Op("=").Id("lw").Dot("Matrix").Call(jen.Lit(path(m.routerName)), m.Experts.Code(), hidden.Clone()))
	} else {
		out = append(out, m.routerField.of(rMLP).Op("=").Id("lw").Dot("Linear").Call(jen.Lit(path(m.routerName)), m.Experts.Code(), hidden.Clone(), m.RouterBias.Code()))
	}
	experts := func(p string, out, in jen.Code) jen.Code {
		return jen.Id("lw").Dot("Experts").Call(jen.Lit(path(m.stacked+"."+p)), m.Experts.Code(), out, in, m.Bias.Code())
	}
	glu := jen.Dict{
		jen.Id("Up"):   experts(m.stackedProjs[1], m.Hidden.Code(), hidden.Clone()),
		jen.Id("Down"): experts(m.stackedProjs[2], hidden.Clone(), m.Hidden.Code()),
	}
	if !m.ungated() {
		glu[jen.Id("Gate")] = experts(m.stackedProjs[0], m.Hidden.Code(), hidden.Clone())
	}
	m.actFields(glu)
	out = append(out, m.expertsField.of(rMLP).Op("=").Op("&").Qual(nnPkg, "SwitchGLU").Values(glu))
	var kind string
	for _, k := range routerKinds {
		if k.kind == m.Router {
			kind = k.nn
		}
	}
	router := jen.Dict{
		jen.Id("Gate"): m.routerField.of(rMLP),
		jen.Id("Kind"): jen.Qual(nnPkg, kind),
		jen.Id("K"):    m.TopK.Code(),
	}
	if !m.Renorm.IsFalse() {
		router[jen.Id("Renorm")] = m.Renorm.Code()
	}
	if m.TopLast {
		router[jen.Id("TopLast")] = jen.True()
	}
	if m.Float32 {
		router[jen.Id("Float32")] = jen.True()
	}
	m.routerExtras(router, path)
	if m.Sigmoid != nil && !m.Sigmoid.IsFalse() {
		router[jen.Id("Sigmoid")] = m.Sigmoid.Code()
	}
	if m.Jitter != nil {
		router[jen.Id("Jitter")] = m.Jitter.Code()
	}
	if m.RenormEps != nil {
		router[jen.Id("Eps")] = m.RenormEps.Code()
	}
	if m.Router.corrected() {
		if m.correctionFrom != "" {
			out = append(out, jen.Id("lw").Dot("MoveTensor").Call(jen.Lit(path(m.correctionFrom)), jen.Lit(path(m.correction))))
		}
		// as stored: mlx-lm keeps a float32 correction bias float32
		bias := jen.Id("lw").Dot("PreciseVector").Call(jen.Lit(path(m.correction)), m.Experts.Code())
		if m.Correction.IsTrue() {
			router[jen.Id("Bias")] = bias
		} else {
			// a bias the config may leave out: set after the literal
			late = append(late, jen.If(m.Correction.Code()).Block(m.moe.of(rMLP).Dot("Router").Dot("Bias").Op("=").Add(bias)))
		}
	}
	if m.Router.grouped() {
		router[jen.Id("Groups")] = m.Groups.Code()
		router[jen.Id("TopKGroups")] = m.TopKGroups.Code()
	}
	if m.Scale != nil && m.Router != "float32_score_norm" {
		router[jen.Id("Scale")] = m.Scale.Code()
	}
	if m.Softcap != nil && !m.Softcap.IsZero() {
		router[jen.Id("Softcap")] = m.Softcap.Code()
	}
	if m.SqrtSoftplus != nil && !m.SqrtSoftplus.IsFalse() {
		router[jen.Id("SqrtSoftplus")] = m.SqrtSoftplus.Code()
	}
	moe := jen.Dict{
		jen.Id("Router"):  jen.Qual(nnPkg, "Router").Values(router),
		jen.Id("Experts"): m.expertsField.of(rMLP),
	}
	if m.Router == "float32_score_norm" {
		// the scale on the weighted sum, in its dtype
		moe[jen.Id("OutScale")] = m.Scale.Code()
	}
	if m.Shared != nil {
		at := m.sharedPath(scope)
		lin := func(p string, o, i jen.Code) jen.Code {
			return jen.Id("lw").Dot("Linear").Call(jen.Lit(at+"."+p), o, i, jen.False())
		}
		glu := jen.Dict{
			jen.Id("Gate"): lin(m.projs[0], m.Shared.Code(), hidden.Clone()),
			jen.Id("Up"):   lin(m.projs[1], m.Shared.Code(), hidden.Clone()),
			jen.Id("Down"): lin(m.projs[2], hidden.Clone(), m.Shared.Code()),
		}
		if m.ungated() {
			glu = jen.Dict{
				jen.Id("Up"):   lin(m.projs[1], m.Shared.Code(), hidden.Clone()),
				jen.Id("Down"): lin(m.projs[2], hidden.Clone(), m.Shared.Code()),
				jen.Id("Act"):  jen.Qual(nnPkg, "ActReLU2"),
			}
		}
		if m.sharedFused {
			glu = jen.Dict{
				jen.Id("GateUp"): lin(m.fusedGateUp, jen.Lit(2).Op("*").Add(m.Shared.Code()), hidden.Clone()),
				jen.Id("Down"):   lin(m.fusedDown, hidden.Clone(), m.Shared.Code()),
			}
		}
		shared := []jen.Code{m.sharedField.of(rMLP).Op("=").Op("&").Qual(nnPkg, "GLU").Values(glu)}
		if m.SharedGate {
			shared = append(shared, m.sharedGateField.of(rMLP).Op("=").Id("lw").Dot("Linear").Call(jen.Lit(path(m.sharedGateName)), jen.Lit(1), hidden.Clone(), jen.False()))
		}
		// a width of 0 (an absent optional key) is no shared expert
		out = append(out, jen.If(m.Shared.Code().Op(">").Lit(0)).Block(shared...))
	}
	out = append(out, m.moe.of(rMLP).Op("=").Qual(nnPkg, "MoE").Values(moe))
	if m.Shared != nil {
		out = append(out, m.moe.of(rMLP).Dot("Shared").Op("=").Add(m.sharedField.of(rMLP)))
		if m.SharedGate {
			out = append(out, m.moe.of(rMLP).Dot("SharedGate").Op("=").Add(m.sharedGateField.of(rMLP)))
		}
	}
	return append(out, late...)
}

// doc says what the sparse block computes.
func (m *MoE) doc() string {
	for _, k := range routerKinds {
		if k.kind == m.Router {
			shared := ""
			switch {
			case m.Shared != nil && m.SharedGate:
				shared = ", plus a shared expert on every token behind a sigmoid gate"
			case m.Shared != nil:
				shared = ", plus a shared expert on every token"
			}
			return fmt.Sprintf("the sparse feed-forward block: a router picks each token's experts (%s), whose %s outputs are summed by their weights%s", k.doc, m.actDoc(), shared)
		}
	}
	return ""
}

// sparseBody is the sparse forward's body on x.
func (m *MoE) sparseBody() []jen.Code {
	return []jen.Code{jen.Return(m.moe.of(rMLP).Dot("Apply").Call(g(), jen.Id("x")))}
}

// sparseFields are an MLP's fields with experts: the dense projections
// (for the dense layers, unless every layer is sparse), then the sparse
// block's.
func (p *MLP) sparseFields() []jen.Code {
	if p.beside() {
		return p.besideFields()
	}
	var out []jen.Code
	if !p.Sparse.allSparse() {
		for _, x := range p.Projs {
			out = append(out, x.Field.decl())
		}
	}
	return append(out, p.Sparse.fields()...)
}

// sparseBuild loads a layer's MLP with experts: sparse or dense as the
// per-layer choice says, with the forward it runs.
func (p *MLP) sparseBuild() []jen.Code {
	if p.beside() {
		return p.besideBuild()
	}
	m := p.Sparse
	sparse := m.build(p.Name)
	if m.allSparse() {
		return sparse
	}
	var dense []jen.Code
	if m.denseFromShared {
		// the dense layer stored as a fused shared expert, at its place
		at := m.sharedPath(p.Name)
		dense = append(dense,
			jen.Id("lw").Dot("UnfuseRows").Call(jen.Lit(at+"."+m.fusedGateUp), jen.Lit(m.dense+"."+m.projs[0]), jen.Lit(m.dense+"."+m.projs[1])),
			jen.Id("lw").Dot("UnfuseRows").Call(jen.Lit(at+"."+m.fusedDown), jen.Lit(m.dense+"."+m.projs[2])))
	}
	for _, x := range p.Projs {
		dense = append(dense, x.load(rMLP, m.dense))
	}
	sparse = append(sparse, m.run.of(rMLP).Op("=").Id(rMLP).Dot("sparse"))
	dense = append(dense, m.run.of(rMLP).Op("=").Id(rMLP).Dot("dense"))
	return []jen.Code{jen.If(m.Sparse.Code()).Block(sparse...).Else().Block(dense...)}
}

// emitSparseForward writes MLP.forward with experts: the sparse block
// alone, or the layer's choice of it and the dense one.
func (p *MLP) emitSparseForward(f *jen.File) {
	if p.beside() {
		p.emitBesideForward(f)
		return
	}
	m := p.Sparse
	method := func(name, doc string, body []jen.Code) {
		f.Comment(comment(name + " is " + doc + "."))
		f.Func().Params(jen.Id(rMLP).Op("*").Id("MLP")).Id(name).Params(graphParam(), jen.Id("x").Add(arrayType())).Add(arrayType()).Block(body...)
	}
	if m.allSparse() {
		method("forward", m.doc(), m.sparseBody())
		return
	}
	method("forward", "the layer's feed-forward block, sparse or dense as loading chose", []jen.Code{jen.Return(m.run.of(rMLP).Call(g(), jen.Id("x")))})
	f.Line()
	method("sparse", m.doc(), m.sparseBody())
	f.Line()
	method("dense", p.kind.doc()+", on the dense layers", p.kind.body(p.proj, p.products))
}

// shard splits the experts as mlx-lm shards them in place: each expert's
// gate and up by rows, its down by columns, the weighted sum then summed
// over the group; the router (and a shared expert's gate) stays whole. A
// shared expert splits as a dense MLP does, and the dense layers' MLP as
// its kind does.
func (m *MoE) shard(plan *ShardPlan, a *Arch, p *MLP) {
	if m.Beside != nil || m.atLayer {
		plan.refuse("its experts are under the layer, beside the dense MLP, which no tensor-parallel plan splits yet")
		return
	}
	if !m.allSparse() {
		if m.dense != p.Name {
			plan.refuse("its dense layers' MLP (%s) is not under the MLP's name (%s), which no tensor-parallel plan follows yet", m.dense, p.Name)
			return
		}
		p.shardDense(plan, a)
	}
	if m.allSparse() && p.Hidden.Text == m.Hidden.Text {
		plan.count(a, p.Hidden, "structure.mlp.hidden") // unused, but it reads the divided key
	}
	plan.count(a, m.Hidden, "structure.moe.hidden")
	roles := []ShardRole{AllToSharded, AllToSharded, ShardedToAll}
	for i, proj := range m.stackedProjs {
		if i == 0 && m.ungated() {
			continue
		}
		plan.tag(p.Name+"."+m.stacked, Proj{Name: proj}, roles[i], 1)
	}
	if m.Shared != nil {
		if m.sharedAtLayer || m.sharedFused {
			plan.refuse("its shared expert (%s) is stored in a layout no tensor-parallel plan splits yet", m.sharedName)
			return
		}
		plan.count(a, m.Shared, "structure.moe.shared")
		for i, proj := range m.projs {
			if i == 0 && m.ungated() {
				continue
			}
			plan.tag(p.Name+"."+m.sharedName, Proj{Name: proj}, roles[i], 1)
		}
	}
}

// together refuses one of two names that go together set without the
// other, naming the one that is set.
func together(a, b F[string], keyA, keyB string) error {
	if a.IsSet() == b.IsSet() {
		return nil
	}
	f, key := a, keyA
	if b.IsSet() {
		f, key = b, keyB
	}
	return errAt(f.Pos, "weights.experts."+key, "%s and %s go together", keyA, keyB)
}
