package gen

// The token-shifted relu² MLP (RWKV-7's channel mix): x moves toward the
// previous token's x by a learned weight per channel (mix, x_k), then
// down(relu(up(·))²). The previous token is state: the layer's mixer kind
// keeps it in the last slot of the layer's state cache (mlpShifted).

type shiftedReLU2MLP struct{ relu2MLP }

func init() { registerMLP("shifted_relu2", shiftedReLU2MLP{}) }

func (shiftedReLU2MLP) doc() string {
	return "the token-shifted feed-forward block: x + (prev - x) · x_k for the previous token's x (the layer's state), then down(relu(up(·))²)"
}

func (shiftedReLU2MLP) mix() string { return "x_k" }
