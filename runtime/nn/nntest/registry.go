package nntest

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/archgen/archgen/runtime/nn"
)

// Lookup checks a registry's Lookup: every name resolves to its arch,
// every remapped alias is refused naming its real arch, every drafter is
// refused as such, and an unknown type is refused.
func Lookup(t *testing.T, lookup func(string) (*nn.Arch, error), names, remapped map[string]string, drafters []string) {
	for name, arch := range names {
		a, err := lookup(name)
		if err != nil || a.Name != arch {
			t.Errorf("Lookup(%q) = %v, %v; want %s", name, a, err, arch)
		}
	}
	for alias, target := range remapped {
		want := fmt.Sprintf("model_type %q is an alias of %q, which archgen does not support", alias, target)
		if _, err := lookup(alias); err == nil || err.Error() != want {
			t.Errorf("Lookup(%q): %v; want %s", alias, err, want)
		}
	}
	for _, d := range drafters {
		want := fmt.Sprintf("model_type %q is a speculative-decoding drafter, which runs beside a target model, not on its own", d)
		if _, err := lookup(d); err == nil || err.Error() != want {
			t.Errorf("Lookup(%q): %v; want %s", d, err, want)
		}
	}
	if _, err := lookup("no_such_model"); err == nil || !strings.HasPrefix(err.Error(), `model_type "no_such_model" is not supported (supported: `) {
		t.Errorf("Lookup of an unknown type: %v", err)
	}
}

// ConfigReference checks each architecture's ParseConfig against mlx-lm.
// dir holds one folder per architecture with published config.json files
// (<name>.json) and what mlx-lm's ModelArgs made of each
// (<name>.mlxlm.json, written by scripts/config_reference.py): the
// dataclass's fields after __post_init__, or the error mlx-lm raised
// building the model. Every architecture needs at least one config.
func ConfigReference(t *testing.T, dir string, archs []nn.Arch) {
	// A variant's configs are its base's (a gemma3_text config with
	// use_bidirectional_attention runs on embeddinggemma): it is checked on
	// the base's files its condition claims, read as loading reads them.
	variantOf := map[string]nn.Arch{}
	for _, a := range archs {
		for _, v := range a.Variants {
			variantOf[v.Runs] = a
		}
	}
	for _, arch := range archs {
		if base, ok := variantOf[arch.Name]; ok {
			t.Run(arch.Name, func(t *testing.T) { variantReference(t, dir, base, arch) })
			continue
		}
		if w := arch.Wrapper; w != nil {
			// A wrapper's configs are read as loading reads them: unwrapped,
			// by the architecture that runs the text model, against mlx-lm's
			// reading of the text model's arguments (which keep the
			// wrapper's model_type, where unwrapping names the runner's).
			var runner *nn.Arch
			for i := range archs {
				if archs[i].Name == w.Runs && archs[i].Wrapper == nil {
					runner = &archs[i]
				}
			}
			if runner == nil {
				t.Errorf("%s runs %q, which is not among the architectures", arch.Name, w.Runs)
				continue
			}
			name := arch.Name
			arch = nn.Arch{Name: name, Ignored: runner.Ignored, Derived: runner.Derived,
				Config: func(data []byte) (any, error) {
					runs, text, err := w.Unwrap(data)
					if err != nil {
						return nil, err
					}
					if runs != runner.Name {
						return nil, fmt.Errorf("dispatched to %q; the reference is %q's", runs, runner.Name)
					}
					cfg, err := runner.Config(text)
					if err != nil {
						return nil, err
					}
					raw, _ := json.Marshal(cfg)
					var m map[string]any
					json.Unmarshal(raw, &m)
					m["model_type"] = name
					return m, nil
				}}
		}
		t.Run(arch.Name, func(t *testing.T) {
			files, _ := filepath.Glob(filepath.Join(dir, arch.Name, "*.json"))
			n := 0
			for _, f := range files {
				if strings.HasSuffix(f, ".mlxlm.json") {
					continue
				}
				n++
				t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
					compareConfig(t, arch, f)
				})
			}
			if n == 0 {
				t.Fatalf("no published configs in %s", filepath.Join(dir, arch.Name))
			}
		})
	}
}

// variantReference compares arch's ParseConfig with the references of
// the configs in base's folder that one of base's variants sends to arch,
// each with its model_type renamed as loading renames it.
func variantReference(t *testing.T, dir string, base, arch nn.Arch) {
	files, _ := filepath.Glob(filepath.Join(dir, base.Name, "*.json"))
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".mlxlm.json") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := base.Config(data)
		if err != nil {
			continue
		}
		claimed := false
		for _, v := range base.Variants {
			claimed = claimed || v.Runs == arch.Name && v.When(cfg)
		}
		if !claimed {
			continue
		}
		n++
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			m["model_type"] = arch.Name
			renamed, _ := json.Marshal(m)
			compareConfigData(t, arch, f, renamed, arch.Name)
		})
	}
	if n == 0 {
		t.Fatalf("no config in %s runs as %s", filepath.Join(dir, base.Name), arch.Name)
	}
}

type reference struct {
	Args  map[string]any `json:"args"`
	Error string         `json:"error"`
}

func compareConfig(t *testing.T, arch nn.Arch, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	compareConfigData(t, arch, path, data, "")
}

// compareConfigData is compareConfig on data, the config at path as
// loading hands it to arch; modelType, where not empty, is the model_type
// arch reads in place of the reference's.
func compareConfigData(t *testing.T, arch nn.Arch, path string, data []byte, modelType string) {
	refData, err := os.ReadFile(strings.TrimSuffix(path, ".json") + ".mlxlm.json")
	if err != nil {
		t.Fatalf("no mlx-lm reference (run scripts/config_reference.py): %v", err)
	}
	var ref reference
	if err := json.Unmarshal(nn.PythonJSON(refData), &ref); err != nil {
		t.Fatal(err)
	}
	if modelType != "" && ref.Args != nil {
		ref.Args["model_type"] = modelType
	}
	cfg, err := arch.Config(data)
	if ref.Error != "" {
		if err == nil {
			t.Fatalf("mlx-lm refuses this config (%s); ParseConfig accepts it", ref.Error)
		}
		return
	}
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	ours, ok := jsonValue(reflect.ValueOf(cfg)).(map[string]any)
	if !ok {
		t.Fatalf("ParseConfig gave %T, not a struct", cfg)
	}
	keys := make([]string, 0, len(ref.Args))
	for k := range ref.Args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := ref.Args[k]
		got, ok := ours[k]
		switch {
		case !ok && slices.Contains(arch.Ignored, k):
		case !ok:
			t.Errorf("%s: mlx-lm reads %v; ParseConfig neither reads nor lists it as ignored", k, want)
		case want == nil && (isZero(got) || slices.Contains(arch.Derived, k)):
		case !sameJSON(got, want):
			t.Errorf("%s: ParseConfig gives %v, mlx-lm %v", k, got, want)
		}
	}
}

// jsonValue is v as encoding/json would decode its encoding (structs by
// their json names, numbers as float64), except that an infinite or NaN
// float is the string Python's json writes for it ("Infinity"), as the
// references hold them after nn.PythonJSON.
func jsonValue(v reflect.Value) any {
	if v.IsValid() && v.Type().Implements(reflect.TypeFor[json.Marshaler]()) && !(v.Kind() == reflect.Pointer && v.IsNil()) {
		raw, _ := json.Marshal(v.Interface())
		var out any
		json.Unmarshal(raw, &out)
		return out
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return jsonValue(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out[name] = jsonValue(v.Field(i))
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonValue(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[fmt.Sprint(k.Interface())] = jsonValue(v.MapIndex(k))
		}
		return out
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		switch {
		case math.IsInf(f, 1):
			return "Infinity"
		case math.IsInf(f, -1):
			return "-Infinity"
		case math.IsNaN(f):
			return "NaN"
		}
		return f
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint())
	case reflect.Bool:
		return v.Bool()
	case reflect.String:
		return v.String()
	}
	raw, _ := json.Marshal(v.Interface())
	var out any
	json.Unmarshal(raw, &out)
	return out
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case float64:
		return x == 0
	case bool:
		return !x
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	}
	return false
}

// sameJSON compares decoded JSON values, numbers by value.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || math.Abs(x-y) <= 1e-12*math.Max(math.Abs(x), math.Abs(y)))
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if !sameJSON(v, y[k]) {
				return false
			}
		}
		return true
	}
	return a == b
}
