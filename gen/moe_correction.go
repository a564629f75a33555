package gen

// The correction bias of the sigmoid routers: a vector of one entry per
// expert added to the scores to pick the experts (never to weigh them).
// Checkpoints keep it under the router's module or beside it, under the
// MLP's.

// corrected: the router reads a correction bias.
func (k RouterKind) corrected() bool {
	return k == "sigmoid_group" || k == "score_group" || k == "sigmoid_bias_norm" || k == "sigmoid_topk" || k == "float32_score_norm" || k == "score_topk_norm"
}

// grouped: the router picks its experts within the best groups of them.
func (k RouterKind) grouped() bool {
	return k == "sigmoid_group" || k == "score_group" || k == "softmax_group_max"
}

// correctionPath is the correction bias's name under the MLP's module,
// for a router of kind k; naming one for a router that reads none is an
// error.
func correctionPath(n ExpertNames, k RouterKind) (string, error) {
	if !k.corrected() {
		for _, x := range []struct {
			f   F[string]
			key string
		}{{n.Correction, "correction"}, {n.CorrectionIn, "correction_in"}} {
			if x.f.IsSet() && x.f.Origin != FromDefault {
				return "", errAt(x.f.Pos, "weights.experts."+x.key, "only a sigmoid_group, score_group, score_topk_norm, sigmoid_bias_norm, sigmoid_topk or float32_score_norm router reads a correction bias")
			}
		}
	}
	switch n.CorrectionIn.V {
	case "router":
		return n.Router.V + "." + n.Correction.V, nil
	case "mlp":
		return n.Correction.V, nil
	}
	return "", errAt(n.CorrectionIn.Pos, "weights.experts.correction_in", "unknown %q (want router or mlp)", n.CorrectionIn.V)
}
