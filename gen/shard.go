package gen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"
)

// Tensor parallelism: the components that split over a group of processes
// (attention, the MLP) tag their linears with the roles of mlx's sharded
// layers and name the config counts the group divides. The architecture's
// plan is their union, emitted as the nn.ShardPlan of its Arch; a
// component that cannot split refuses, and the architecture then has no
// plan and says why (nn.Arch.NoShard).

// ShardRole is how a linear is split: its output rows (all-to-sharded) or
// its input columns, summed over the group (sharded-to-all).
type ShardRole int

const (
	AllToSharded ShardRole = iota + 1
	ShardedToAll
)

func (r ShardRole) code() jen.Code {
	if r == AllToSharded {
		return jen.Qual(nnPkg, "AllToSharded")
	}
	return jen.Qual(nnPkg, "ShardedToAll")
}

// ShardPlan is an architecture's tensor-parallel plan, or why it has none.
type ShardPlan struct {
	// Linears are the split linears by the name the build passes to
	// Weights.Linear ("self_attn.q_proj").
	Linears map[string]ShardRole
	// Parts are the fused linears among them, with their equal parts.
	Parts map[string]int
	// Counts are the config keys the group size divides once parsed.
	Counts []string
	// Refused says why the architecture has no plan; "" when it has one.
	Refused string

	counted []*Value // the values the counts come from
}

// sharder is a component that splits over a group.
type sharder interface {
	shard(p *ShardPlan, a *Arch)
}

// tag gives the linear pr of module scope a role; parts > 1 marks a fused
// linear of that many equal parts.
func (p *ShardPlan) tag(scope string, pr Proj, role ShardRole, parts int) {
	name := joinName(scope, pr.Name)
	p.Linears[name] = role
	if parts > 1 {
		p.Parts[name] = parts
	}
}

// count adds the config key v (at path in the descriptor) to the counts;
// a value that is not an integer config key of config.json refuses.
func (p *ShardPlan) count(a *Arch, v *Value, path string) {
	key := strings.TrimSpace(v.Text)
	for _, k := range a.Keys {
		if k.Name == key && k.Type == TInt {
			if !slices.Contains(p.Counts, key) {
				p.Counts = append(p.Counts, key)
			}
			p.counted = append(p.counted, v)
			return
		}
	}
	if k := p.countedFactor(a, key); k != "" {
		// a counted key times others (a shared expert's width, moe
		// hidden times the shared count): computed on the divided config,
		// it is the process's share of the whole
		p.counted = append(p.counted, v)
		return
	}
	p.refuse("%s is %q, not a config key the group size can divide", path, v.Text)
}

// countedFactor is, for text a product of integer config keys, the factor
// the plan counts already ("" when text is no such product, or counts
// none of them): the product of the divided config is then the share.
func (p *ShardPlan) countedFactor(a *Arch, text string) string {
	factors := strings.Split(text, "*")
	if len(factors) < 2 {
		return ""
	}
	counted := ""
	for _, f := range factors {
		f = strings.TrimSpace(f)
		isInt := false
		for _, k := range a.Keys {
			isInt = isInt || k.Name == f && k.Type == TInt
		}
		if !isInt {
			return ""
		}
		if counted == "" && slices.Contains(p.Counts, f) {
			counted = f
		}
	}
	return counted
}

// refuse records why there is no plan; the first reason stands.
func (p *ShardPlan) refuse(format string, args ...any) {
	if p.Refused == "" {
		p.Refused = fmt.Sprintf(format, args...)
	}
}

// ShardPlan is a's tensor-parallel plan, gathered from its components.
func (a *Arch) ShardPlan() *ShardPlan {
	p := &ShardPlan{Linears: map[string]ShardRole{}, Parts: map[string]int{}}
	for _, c := range a.components() {
		if s, ok := c.(sharder); ok {
			s.shard(p, a)
		}
	}
	// The counts are divided once the config is parsed: a value the build
	// computes from one of them would see the share, not the whole.
	for _, v := range a.values {
		if strings.HasPrefix(v.path, "config.") || slices.Contains(p.counted, v) {
			continue
		}
		for _, r := range v.refs {
			if slices.Contains(p.Counts, r) {
				p.refuse("%s (%q) reads %s, which the group size divides", v.path, v.Text, r)
			}
		}
	}
	if p.Refused != "" {
		return &ShardPlan{Refused: p.Refused}
	}
	return p
}

// shardFact is the Arch entry of a's plan: Shard, or NoShard with why.
func shardFact(a *Arch) kvPair {
	p := a.ShardPlan()
	if p.Refused != "" {
		return kvPair{"NoShard", jen.Lit(p.Refused)}
	}
	linears := jen.Dict{}
	for _, n := range sortedKeys(p.Linears) {
		linears[jen.Lit(n)] = p.Linears[n].code()
	}
	fields := []kvPair{
		{"Linears", jen.Map(jen.String()).Qual(nnPkg, "ShardRole").Values(linears)},
		{"Counts", strList(p.Counts)},
	}
	if len(p.Parts) > 0 {
		parts := jen.Dict{}
		for _, n := range sortedKeys(p.Parts) {
			parts[jen.Lit(n)] = jen.Lit(p.Parts[n])
		}
		fields = append(fields, kvPair{"Parts", jen.Map(jen.String()).Int().Values(parts)})
	}
	return kvPair{"Shard", jen.Op("&").Qual(nnPkg, "ShardPlan").Values(fieldsOf(fields)...)}
}
