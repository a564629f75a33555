package nn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// ConfigError is a problem with one config.json key.
type ConfigError struct {
	Key string
	Msg string
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Msg }

// ConfigReader reads the top-level keys of a config.json as a generated
// ParseConfig asks for them, collecting one error per bad key. A key whose
// value is null reads as absent, as None does in mlx-lm's dataclasses. A
// config that nests its text model's keys (text_config) is a wrapper's,
// which Wrapper.Unwrap turns into a plain one first.
type ConfigReader struct {
	modelType string
	keys      map[string]json.RawMessage
	errs      []error
}

// NewConfigReader parses data, a config.json.
func NewConfigReader(data []byte) (*ConfigReader, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(PythonJSON(data), &top); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if top == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	r := &ConfigReader{keys: top}
	if mt, ok := top["model_type"]; ok && !isNull(mt) {
		if err := json.Unmarshal(mt, &r.modelType); err != nil {
			r.fail("model_type", "want a string, got %s", clip(mt))
		}
	} else {
		r.fail("model_type", "missing (required)")
	}
	return r, nil
}

// ReadConfigFile reads dir/config.json.
func ReadConfigFile(dir string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, "config.json"))
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// AutoAbsent makes key absent where it holds the string "auto" (Hugging
// Face's word for a value its model derives), so that the descriptor's
// derivation gives it, as mlx-lm's __post_init__ does.
func (r *ConfigReader) AutoAbsent(key string) {
	if v, ok := r.keys[key]; ok && string(bytes.TrimSpace(v)) == `"auto"` {
		delete(r.keys, key)
	}
}

// ModelType is the config's top-level model_type.
func (r *ConfigReader) ModelType() string { return r.modelType }

// Err is every error met so far, one per line, or nil.
func (r *ConfigReader) Err() error { return errors.Join(r.errs...) }

func (r *ConfigReader) fail(key, format string, args ...any) {
	r.add(key, fmt.Sprintf(format, args...))
}

// Fail records err as a problem with key.
func (r *ConfigReader) Fail(key string, err error) {
	if err != nil {
		r.add(key, err.Error())
	}
}

// add records a problem with key unless one is recorded already: a missing
// or mistyped key reads as its zero value, whose checks would only repeat
// the first problem.
func (r *ConfigReader) add(key, msg string) {
	for _, e := range r.errs {
		if ce, ok := e.(*ConfigError); ok && ce.Key == key {
			return
		}
	}
	r.errs = append(r.errs, &ConfigError{Key: key, Msg: msg})
}

// lookup finds key, or else the first of alts (dotted paths into nested
// objects, such as rope_parameters.rope_theta) that is present.
func (r *ConfigReader) lookup(key string, alts []string) (json.RawMessage, string, bool) {
	if v, ok := r.keys[key]; ok && !isNull(v) {
		return v, key, true
	}
	for _, alt := range alts {
		parts := strings.Split(alt, ".")
		v, ok := r.keys[parts[0]]
		for _, p := range parts[1:] {
			if !ok || isNull(v) {
				break
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(v, &obj) != nil {
				ok = false
				break
			}
			v, ok = obj[p]
		}
		if ok && !isNull(v) {
			return v, alt, true
		}
	}
	return nil, key, false
}

// MaxLayers bounds num_hidden_layers; published models have a few hundred
// layers at most.
const MaxLayers = 1 << 12

// Value is a type a config key can have.
type Value interface {
	int | float64 | bool | string | []int | []float64 | []string | []bool | *RopeScaling
}

// Required reads key, which must be present (or one of alts).
func Required[T Value](r *ConfigReader, key string, alts ...string) T {
	v, present, _ := read[T](r, key, alts)
	if !present {
		r.fail(key, "missing (required)")
	}
	return v
}

// Default reads key (or one of alts), or def when absent.
func Default[T Value](r *ConfigReader, key string, def T, alts ...string) T {
	if v, _, ok := read[T](r, key, alts); ok {
		return v
	}
	return def
}

// DefaultRopeScaling is Default for a rope_scaling key whose default is a
// scaling of its own (def, a JSON object): the config's, where it holds
// one, else def's.
func DefaultRopeScaling(r *ConfigReader, key, def string, alts ...string) *RopeScaling {
	if v, _, ok := read[*RopeScaling](r, key, alts); ok {
		return v
	}
	rs, err := ParseRopeScaling(json.RawMessage(def))
	if err != nil {
		r.fail(key, "its default %s: %v", def, err)
	}
	return rs
}

// DefaultOrNull is Default, except that a key the config holds as null
// reads as null: mlx-lm's dataclass takes an explicit None over a default
// that is a value (DeepSeek-V3's q_lora_rank: null means no compressed
// queries, absent means its default rank).
func DefaultOrNull[T Value](r *ConfigReader, key string, def, null T, alts ...string) T {
	if v, ok := r.keys[key]; ok && isNull(v) {
		return null
	}
	return Default(r, key, def, alts...)
}

// Prefer is the value at the first of places (dotted paths into nested
// objects) that the config holds, or cur, what the key itself read.
func Prefer[T Value](r *ConfigReader, cur T, places ...string) T {
	if v, _, ok := read[T](r, "", places); ok {
		return v
	}
	return cur
}

// Optional reads key (or one of alts) and reports whether it was present
// and well-typed.
func Optional[T Value](r *ConfigReader, key string, alts ...string) (T, bool) {
	v, _, ok := read[T](r, key, alts)
	return v, ok
}

// read is key's value (or one of alts'), whether the config has it, and
// whether it was well-typed (a bad value is recorded).
func read[T Value](r *ConfigReader, key string, alts []string) (v T, present, ok bool) {
	raw, name, present := r.lookup(key, alts)
	if !present {
		return v, false, false
	}
	v, err := decode[T](raw)
	if err != nil {
		r.fail(name, "%v", err)
		return v, true, false
	}
	if n, isInt := any(v).(int); isInt && key == "num_hidden_layers" && n > MaxLayers {
		// Per-layer lists and modules are built from it before any weight
		// is read: a corrupt count must not exhaust memory first.
		r.fail(name, "%d layers are more than archgen builds (at most %d)", n, MaxLayers)
		var zero T
		return zero, true, false
	}
	if rs, isRope := any(v).(*RopeScaling); isRope && rs == nil {
		return v, false, false // {} is no scaling
	}
	return v, true, true
}

func decode[T Value](raw json.RawMessage) (T, error) {
	var out T
	var err error
	switch p := any(&out).(type) {
	case *int:
		*p, err = decodeInt(raw)
	case *float64:
		var ok bool
		if *p, ok = decodeFloat(raw); !ok {
			err = fmt.Errorf("want a number, got %s", clip(raw))
		}
	case *bool:
		if json.Unmarshal(raw, p) != nil {
			err = fmt.Errorf("want true or false, got %s", clip(raw))
		}
	case *string:
		if json.Unmarshal(raw, p) != nil {
			err = fmt.Errorf("want a string, got %s", clip(raw))
		}
	case *[]int:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return out, fmt.Errorf("want a list of integers, got %s", clip(raw))
		}
		*p = make([]int, len(items))
		for i, it := range items {
			if (*p)[i], err = decodeInt(it); err != nil {
				return out, fmt.Errorf("entry %d: %v", i, err)
			}
		}
	case *[]float64:
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return out, fmt.Errorf("want a list of numbers, got %s", clip(raw))
		}
		*p = make([]float64, len(items))
		for i, it := range items {
			var ok bool
			if (*p)[i], ok = decodeFloat(it); !ok {
				return out, fmt.Errorf("want a list of numbers, got %s", clip(raw))
			}
		}
	case *[]string:
		if json.Unmarshal(raw, p) != nil {
			err = fmt.Errorf("want a list of strings, got %s", clip(raw))
		}
	case *[]bool:
		if json.Unmarshal(raw, p) != nil {
			err = fmt.Errorf("want a list of true and false, got %s", clip(raw))
		}
	case **RopeScaling:
		*p, err = ParseRopeScaling(raw)
	}
	return out, err
}

// decodeFloat reads a number, or Python's Infinity, -Infinity and NaN:
// bare (which PythonJSON has quoted), or tagged as transformers and
// mlx-lm save them, {"__float__": "Infinity"}.
func decodeFloat(raw json.RawMessage) (float64, bool) {
	var f float64
	if json.Unmarshal(raw, &f) == nil {
		return f, true
	}
	var tagged map[string]json.RawMessage
	if json.Unmarshal(raw, &tagged) == nil && len(tagged) == 1 && tagged["__float__"] != nil {
		raw = tagged["__float__"]
	}
	switch string(bytes.TrimSpace(raw)) {
	case `"Infinity"`:
		return math.Inf(1), true
	case `"-Infinity"`:
		return math.Inf(-1), true
	case `"NaN"`:
		return math.NaN(), true
	}
	return 0, false
}

// PythonJSON is data with the bare Infinity, -Infinity and NaN that
// Python's json module writes (Hugging Face's configs hold them: a
// time_step_limit of [0.0, Infinity]) quoted, so that a JSON decoder reads
// them as strings, which the float readers take back as those numbers.
func PythonJSON(data []byte) []byte {
	var out []byte
	last := 0 // data[:last] is in out
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			continue
		}
		for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(data[i:], []byte(tok)) {
				out = append(out, data[last:i]...)
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				last = i + 1
				break
			}
		}
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

func decodeInt(raw json.RawMessage) (int, error) {
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		return 0, fmt.Errorf("want an integer, got %s", clip(raw))
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("want an integer, got %s", clip(raw))
	}
	return int(f), nil
}

// Number is the type of a value Min can bound.
type Number interface{ int | float64 }

// Min records an error unless v >= least.
func Min[T Number](r *ConfigReader, key string, v, least T) {
	if v < least {
		r.fail(key, "must be at least %v, got %v", least, v)
	}
}

// LayerCount records an error when n, the layer count read from key, is
// more than archgen builds. Generated parsers call it on their layer-count
// key before anything is built per layer (num_hidden_layers is refused as
// it is read).
func LayerCount(r *ConfigReader, key string, n int) {
	if n > MaxLayers {
		r.fail(key, "%d layers are more than archgen builds (at most %d)", n, MaxLayers)
	}
}

// Len records an error unless a list key has want entries; wantName says
// where want comes from.
func (r *ConfigReader) Len(key string, n, want int, wantName string) {
	if n != want {
		r.fail(key, "has %d entries, want %d (%s)", n, want, wantName)
	}
}

// Check records msg as a problem with key unless ok.
func (r *ConfigReader) Check(ok bool, key, msg string) {
	if !ok {
		r.fail(key, "%s", msg)
	}
}

// PerLayer is the list f(0), ..., f(n-1).
func PerLayer[T any](n int, f func(i int) T) []T {
	out := make([]T, max(n, 0))
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// Count is how many entries of list equal v.
func Count[T comparable](list []T, v T) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

// Indices are the positions of list that hold v, in order (the
// descriptors' indices(list, v)).
func Indices[T comparable](list []T, v T) []int {
	out := []int{}
	for i, x := range list {
		if x == v {
			out = append(out, i)
		}
	}
	return out
}

// LastIndex is the last position of list below end that holds v, or -1
// where none does (the descriptors' last_index(list, v, end)).
func LastIndex[T comparable](list []T, v T, end int) int {
	for i := min(end, len(list)) - 1; i >= 0; i-- {
		if list[i] == v {
			return i
		}
	}
	return -1
}

// Btoi is 1 for true and 0 for false, as Python's int(bool).
func Btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
