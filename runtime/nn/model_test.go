package nn

import "testing"

func TestCatalog(t *testing.T) {
	c := NewCatalog([]Arch{{Name: "llama", Aliases: []string{"mistral"}}, {Name: "gemma"}},
		map[string]string{"llava": "mistral3"}, []string{"gemma4_assistant"})
	for name, want := range map[string]string{"llama": "llama", "mistral": "llama", "gemma": "gemma"} {
		if a, err := c.Lookup(name); err != nil || a.Name != want {
			t.Errorf("%s: %v %v", name, a, err)
		}
	}
	for name, want := range map[string]string{
		"llava":            `model_type "llava" is an alias of "mistral3", which archgen does not support`,
		"gemma4_assistant": `model_type "gemma4_assistant" is a speculative-decoding drafter, which runs beside a target model, not on its own`,
		"mamba":            `model_type "mamba" is not supported (supported: gemma, llama, mistral)`,
	} {
		if _, err := c.Lookup(name); err == nil || err.Error() != want {
			t.Errorf("%s: %v; want %s", name, err, want)
		}
	}
	if got := c.Archs(); got[0].Name != "gemma" || got[1].Name != "llama" {
		t.Errorf("Archs not sorted: %v", got)
	}
	if err := CheckModelType("qwen2", "llama", []string{"mistral"}); err == nil || err.Error() != `model_type: "qwen2" is not llama or mistral` {
		t.Errorf("CheckModelType: %v", err)
	}
	if _, err := ModelTypeOf([]byte(`{"x": 1}`)); err == nil || err.Error() != "model_type: missing (required)" {
		t.Errorf("ModelTypeOf: %v", err)
	}
}
