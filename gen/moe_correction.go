package gen

// The correction bias of the sigmoid routers: a vector of one entry per
// expert added to the scores to pick the experts (never to weigh them).
// Checkpoints keep it under the router's module or beside it, under the
// MLP's.

// corrected: the router reads a correction bias.
func (k RouterKind) corrected() bool {
	return k == "sigmoid_group" || k == "sigmoid_bias_norm"
}

// correctionPath is the correction bias's name under the MLP's module.
func correctionPath(n ExpertNames) (string, error) {
	switch n.CorrectionIn.V {
	case "router":
		return n.Router.V + "." + n.Correction.V, nil
	case "mlp":
		return n.Correction.V, nil
	}
	return "", errAt(n.CorrectionIn.Pos, "weights.experts.correction_in", "unknown %q (want router or mlp)", n.CorrectionIn.V)
}
