package gen

import (
	"strings"
	"testing"
)

// TestAttentionErrors: the attention constructs used wrongly, each with
// its exact message naming the file, the line and the key.
func TestAttentionErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"float32 with softcap", strings.Replace(base, "  mlp:", "  attention:\n    float32: true\n    softcap: \"50.0\"\n  mlp:", 1),
			`descriptors/a.yaml:16: structure.attention.float32: soft-capped attention is written out in the model's dtype; float32 does not apply`},
		{"float32 not a bool", strings.Replace(base, "  mlp:", "  attention:\n    float32: fp32\n  mlp:", 1),
			`descriptors/a.yaml:16: structure.attention.float32: want true or false, got "fp32"`},
		{"unknown qk_norm", strings.Replace(base, "  mlp:", "  attention:\n    qk_norm: after_rope\n  mlp:", 1),
			`descriptors/a.yaml:16: structure.attention.qk_norm: unknown "after_rope" (want one of none, per_head, full_width, per_head_after_rope, per_head_unweighted, per_head_unweighted_after_rope, each_head)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
	// Each construct used rightly resolves.
	for _, ok := range []string{"    float32: true\n", "    qk_norm: per_head_after_rope\n"} {
		if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(strings.Replace(base, "  mlp:", "  attention:\n"+ok+"  mlp:", 1))}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
