package gen

import "regexp"

// Checkpoint names (weights.names): each component declares its roles, a
// key of weights.names with its default and where the resolved name goes;
// defaults, checks and resolution read that one list.

// nameRole is one key of weights.names.
type nameRole struct {
	key, def string // def "": no default, or one the component sets itself
	leaf     func(*Names) *F[string]
	out      func(*ResolvedNames) *string
}

// modelRoles are the names of the model's own modules.
var modelRoles = []nameRole{
	{"model", "model", func(n *Names) *F[string] { return &n.Model }, func(r *ResolvedNames) *string { return &r.Model }},
	{"embed", "embed_tokens", func(n *Names) *F[string] { return &n.Embed }, func(r *ResolvedNames) *string { return &r.Embed }},
	{"layers", "layers", func(n *Names) *F[string] { return &n.Layers }, func(r *ResolvedNames) *string { return &r.Layers }},
	{"norm", "norm", func(n *Names) *F[string] { return &n.Norm }, func(r *ResolvedNames) *string { return &r.Norm }},
	{"lm_head", "lm_head", func(n *Names) *F[string] { return &n.LMHead }, func(r *ResolvedNames) *string { return &r.LMHead }},
	{"positions", "wpe", func(n *Names) *F[string] { return &n.Positions }, func(r *ResolvedNames) *string { return &r.Positions }},
	{"token_types", "token_type_embeddings", func(n *Names) *F[string] { return &n.TokenTypes }, func(r *ResolvedNames) *string { return &r.TokenTypes }},
}

// checkpointRoles are every component's roles.
func checkpointRoles() []nameRole {
	var out []nameRole
	for _, rs := range [][]nameRole{modelRoles, attentionRoles, mlpRoles, blockRoles} {
		out = append(out, rs...)
	}
	return out
}

// names checks and resolves the checkpoint names.
func (b *builder) names() error {
	n := &b.d.Weights.Names
	for _, r := range checkpointRoles() {
		f := r.leaf(n)
		if f.IsSet() && !((r.key == "model" || r.key == "mlp") && f.V == "") && !checkpointName.MatchString(f.V) {
			return errAt(f.Pos, "weights.names."+r.key, "%q is not a checkpoint name (dotted names of letters, digits and _)", f.V)
		}
		*r.out(&b.a.Names) = f.V
	}
	return nil
}

// joinName is name under the module prefix ("": none).
func joinName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// checkpointName is a module's name in a checkpoint: dotted names.
var checkpointName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
