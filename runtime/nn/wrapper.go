package nn

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Wrapper is a model_type whose checkpoints hold a text model inside a
// larger one (a vision-language model, say): its config nests the text
// model's config in a section, and its tensors carry prefixes and towers
// the text model has none of. Loading one unwraps both and runs the text
// model on the architecture its section names. Every fact comes from the
// wrapper's descriptor.
type Wrapper struct {
	// Section is the config key holding the text model's config;
	// SectionOptional reads a config without it as the text model's own.
	Section         string
	SectionOptional bool
	// TopWins are top-level keys whose value replaces the section's.
	TopWins []string
	// Defaults are section values set where the section lacks them.
	Defaults map[string]any
	// TopDefaults are top-level values set where the top level lacks
	// them, before TopWins copies them into the section.
	TopDefaults map[string]any
	// Set are section values set whatever the section holds.
	Set map[string]any
	// Runs is the architecture the text model runs on; Dispatch, when
	// set, picks another one by the section's model_type.
	Runs     string
	Dispatch map[string]string
	// Prefixes rewrite checkpoint names to the text model's, the first
	// that matches; Drop are the substrings of tensors loading drops (the
	// vision tower, the projector).
	Prefixes []Prefix
	Drop     []string
	// Refuse are section model_types whose text model runs on an
	// architecture archgen does not support: loading one is an error
	// naming the section's model_type, not a run on Runs.
	Refuse []string
}

// Prefix rewrites a checkpoint name that starts with From to start with
// To.
type Prefix struct{ From, To string }

// carried are top-level keys a wrapped config always hands to its text
// model: how its tensors are quantized.
var carried = []string{"quantization", "quantization_config"}

// Unwrap turns a wrapper's config.json into its text model's, and says
// which architecture runs it.
func (w *Wrapper) Unwrap(data []byte) (arch string, text []byte, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(PythonJSON(data), &top); err != nil || top == nil {
		return "", nil, fmt.Errorf("not a JSON object")
	}
	sec := map[string]json.RawMessage{}
	raw, ok := top[w.Section]
	switch {
	case (!ok || isNull(raw)) && w.SectionOptional:
		for k, v := range top {
			sec[k] = v
		}
	case !ok || isNull(raw):
		return "", nil, &ConfigError{Key: w.Section, Msg: "missing (required): the text model's config"}
	default:
		if err := json.Unmarshal(raw, &sec); err != nil || sec == nil {
			return "", nil, &ConfigError{Key: w.Section, Msg: "want an object, got " + clip(raw)}
		}
	}
	for k, v := range w.TopDefaults {
		if cur, ok := top[k]; !ok || isNull(cur) {
			b, _ := json.Marshal(v)
			top[k] = b
		}
	}
	for _, k := range append(append([]string(nil), w.TopWins...), carried...) {
		if v, ok := top[k]; ok && !isNull(v) {
			sec[k] = v
		}
	}
	for k, v := range w.Defaults {
		if cur, ok := sec[k]; !ok || isNull(cur) {
			b, _ := json.Marshal(v)
			sec[k] = b
		}
	}
	for k, v := range w.Set {
		b, _ := json.Marshal(v)
		sec[k] = b
	}
	arch = w.Runs
	if mt, ok := sec["model_type"]; ok && (len(w.Dispatch) > 0 || len(w.Refuse) > 0) {
		var s string
		if json.Unmarshal(mt, &s) == nil {
			if a, ok := w.Dispatch[s]; ok {
				arch = a
			}
			if slices.Contains(w.Refuse, s) {
				return "", nil, &ConfigError{Key: w.Section + ".model_type",
					Msg: fmt.Sprintf("%q: this checkpoint's text model runs on the %s architecture, which archgen does not support", s, s)}
			}
		}
	}
	b, _ := json.Marshal(arch)
	sec["model_type"] = b
	text, err = json.Marshal(sec)
	return arch, text, err
}

// rename is a checkpoint name as the text model reads it, or false for a
// tensor loading drops.
func (w *Wrapper) rename(name string) (string, bool) {
	for _, d := range w.Drop {
		if strings.Contains(name, d) {
			return "", false
		}
	}
	for _, p := range w.Prefixes {
		if rest, ok := strings.CutPrefix(name, p.From); ok {
			return p.To + rest, true
		}
	}
	return name, true
}

// loadWrapped loads a wrapper's checkpoint on the architecture its text
// model runs on.
func (c *Catalog) loadWrapped(dir string, w *Wrapper, data []byte, opts Options) (Model, error) {
	arch, text, err := w.Unwrap(data)
	if err != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	a, err := c.Lookup(arch)
	if err != nil || a.Wrapper != nil {
		opts.freeTensors()
		return nil, fmt.Errorf("%s: the text model's architecture %q: %v", dir, arch, err)
	}
	opts.Config = text
	prev := opts.Rename
	opts.Rename = func(name string) (string, bool) {
		n, keep := w.rename(name)
		if keep && prev != nil {
			return prev(n)
		}
		return n, keep
	}
	if err := a.plan(dir, &opts); err != nil {
		return nil, err
	}
	return a.Load(dir, opts)
}
