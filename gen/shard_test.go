package gen

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/archgen/archgen/generated/registry"
	"github.com/archgen/archgen/runtime/nn"
)

// TestShardPlans checks every architecture's plan against the checkpoint
// of its test_config: the generated Arch carries the plan the components
// derive, each split linear is a tensor every layer of the checkpoint
// has, each fused one splits into its parts, and each count is an integer
// config key of the parsed config.
func TestShardPlans(t *testing.T) {
	s, err := Load("../descriptors", "descriptors")
	if err != nil {
		t.Fatal(err)
	}
	planned, decoders := 0, 0
	for _, a := range s.Archs {
		if a.Encoder == nil {
			decoders++
		}
		t.Run(a.Name, func(t *testing.T) {
			arch, err := registry.Lookup(a.Name)
			if err != nil {
				t.Fatal(err)
			}
			p := a.ShardPlan()
			if p.Refused != "" {
				if arch.Shard != nil || arch.NoShard != p.Refused {
					t.Fatalf("the registry's plan %+v, NoShard %q; want none, and %q", arch.Shard, arch.NoShard, p.Refused)
				}
				return
			}
			planned++
			want := map[string]nn.ShardRole{}
			for name, r := range p.Linears {
				want[name] = map[ShardRole]nn.ShardRole{AllToSharded: nn.AllToSharded, ShardedToAll: nn.ShardedToAll}[r]
			}
			if arch.Shard == nil || !reflect.DeepEqual(arch.Shard.Linears, want) || !reflect.DeepEqual(arch.Shard.Counts, p.Counts) ||
				len(arch.Shard.Parts) != len(p.Parts) {
				t.Fatalf("the registry's plan %+v differs from the derived %+v", arch.Shard, p)
			}
			cfg, err := json.Marshal(a.TestConfig)
			if err != nil {
				t.Fatal(err)
			}
			specs, err := arch.Tensors(cfg)
			if err != nil {
				t.Fatal(err)
			}
			shapes := map[string][]int{}
			for _, sp := range specs {
				shapes[sp.Name] = sp.Shape
			}
			var counts map[string]any
			json.Unmarshal(cfg, &counts)
			layers, _ := counts[a.Layers.Text].(float64)
			n := int(layers)
			if n < 1 {
				t.Fatalf("test_config's %s is %v", a.Layers.Text, counts[a.Layers.Text])
			}
			for name, role := range arch.Shard.Linears {
				if role != nn.AllToSharded && role != nn.ShardedToAll {
					t.Errorf("%s: role %v", name, role)
				}
				held := 0 // a model of dense and sparse layers holds some linears on some layers
				for l := range n {
					w := fmt.Sprintf("%s.%d.%s.weight", a.path(a.Names.Layers), l, name)
					shape, ok := shapes[w]
					if !ok { // a vector split by heads (attention sinks) has no .weight
						shape, ok = shapes[strings.TrimSuffix(w, ".weight")]
					}
					if !ok {
						continue
					}
					held++
					axis := len(shape) - 2 // rows; stacked experts [E, out, in] too
					if role == nn.ShardedToAll {
						axis = len(shape) - 1
					}
					if parts := arch.Shard.Parts[name]; parts > 1 && shape[axis]%parts != 0 {
						t.Errorf("%s %v does not hold %d equal parts on axis %d", w, shape, parts, axis)
					}
				}
				if held == 0 {
					t.Errorf("the plan splits %s, but no layer of the checkpoint has it", name)
				}
			}
			c, err := arch.Config(cfg)
			if err != nil {
				t.Fatal(err)
			}
			v := reflect.ValueOf(c).Elem()
			for _, key := range arch.Shard.Counts {
				found := false
				for i := range v.NumField() {
					tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
					found = found || tag == key && v.Field(i).Kind() == reflect.Int
				}
				if !found {
					t.Errorf("the plan divides %q, which the parsed config has no integer field for", key)
				}
			}
		})
	}
	if planned < decoders/2 {
		t.Errorf("only %d of %d decoders have a plan", planned, decoders)
	}
}

// TestShardPlanRefusals: the plans base's components give, and the exact
// reason of each architecture they cannot split.
func TestShardPlanRefusals(t *testing.T) {
	attn := func(lines string) string {
		return strings.Replace(base, "  mlp:\n", "  attention:\n"+lines+"  mlp:\n", 1)
	}
	for _, c := range []struct {
		name, desc string
		want       string // the refusal, "" for a plan
		parts      map[string]int
	}{
		{"separate projections", base, "", map[string]int{}},
		{"fused gate_up", strings.Replace(base, "kind: swiglu", "kind: fused_swiglu", 1), "", map[string]int{"mlp.gate_up_proj": 2}},
		{"fused qkv", attn("    fused_qkv: true\n"),
			"its fused self_attn.qkv_proj holds q, k and v parts of unequal sizes (num_attention_heads heads of queries, num_key_value_heads of keys and of values), which a plan's equal parts cannot split", nil},
		{"q and k norms over all heads", attn("    qk_norm: full_width\n"),
			"its self_attn.q_norm and self_attn.k_norm norms span the width of all heads, which no process holds", nil},
		{"a head count that is no config key", attn("    heads: \"num_key_value_heads * 2\"\n"),
			`structure.attention.heads is "num_key_value_heads * 2", not a config key the group size can divide`, nil},
		{"a value the build computes from a count", attn("    head_dim: \"hidden_size // num_attention_heads\"\n"),
			`structure.attention.head_dim ("hidden_size // num_attention_heads") reads num_attention_heads, which the group size divides`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.desc)})
			if err != nil {
				t.Fatal(err)
			}
			p := s.Arch("a").ShardPlan()
			if p.Refused != c.want {
				t.Fatalf("refused %q, want %q", p.Refused, c.want)
			}
			if c.want != "" {
				if len(p.Linears) != 0 || len(p.Counts) != 0 {
					t.Errorf("a refused plan splits %v, divides %v", p.Linears, p.Counts)
				}
				return
			}
			up := map[string]ShardRole{"self_attn.q_proj": AllToSharded, "self_attn.k_proj": AllToSharded, "self_attn.v_proj": AllToSharded,
				"self_attn.o_proj": ShardedToAll, "mlp.down_proj": ShardedToAll}
			if len(c.parts) > 0 {
				up["mlp.gate_up_proj"] = AllToSharded
			} else {
				up["mlp.gate_proj"], up["mlp.up_proj"] = AllToSharded, AllToSharded
			}
			if !reflect.DeepEqual(p.Linears, up) || !reflect.DeepEqual(p.Parts, c.parts) ||
				!reflect.DeepEqual(p.Counts, []string{"num_attention_heads", "num_key_value_heads", "intermediate_size"}) {
				t.Errorf("plan %+v, want linears %v, parts %v", p, up, c.parts)
			}
		})
	}
}
