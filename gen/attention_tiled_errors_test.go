package gen

import (
	"strings"
	"testing"
)

// TestKVTiledErrors: tiled key-value heads beside what pairs heads
// otherwise, each with its exact message.
func TestKVTiledErrors(t *testing.T) {
	attn := func(extra string) string {
		return strings.Replace(base, "structure:\n", "structure:\n  attention:\n"+extra, 1)
	}
	if _, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(attn("    kv_tiled: true\n"))}); err != nil {
		t.Fatalf("kv_tiled: %v", err)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"tiled with sinks", attn("    kv_tiled: true\n    sinks: true\n"),
			"descriptors/a.yaml:16: structure.attention.kv_tiled: attention sinks, one per head, go with grouped key-value heads, not tiled"},
		{"tiled with shared keys and values", attn("    kv_tiled: true\n    kv_from: i\n"),
			"descriptors/a.yaml:16: structure.attention.kv_tiled: layers that read another layer's keys and values take them grouped, not tiled"},
		{"an unknown head gate function", attn("    head_gate: {name: g_proj, act: tanh}\n"),
			`descriptors/a.yaml:16: structure.attention.head_gate.act: unknown "tanh" (want sigmoid or softplus)`},
		{"a head gate's when not a bool", attn("    head_gate: {name: g_proj, when: head_dim}\n"),
			`descriptors/a.yaml:16: structure.attention.head_gate.when: "head_dim" is int, want bool`},
		{"tiled not a bool", attn("    kv_tiled: 2\n"),
			"descriptors/a.yaml:16: structure.attention.kv_tiled: want true or false, got 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{"descriptors/a.yaml": []byte(c.yaml)})
			if err == nil {
				t.Fatalf("no error; want %s", c.want)
			}
			if err.Error() != c.want {
				t.Fatalf("error\n%s\nwant\n%s", err, c.want)
			}
		})
	}
}
