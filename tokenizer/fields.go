package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// fields is one JSON object of tokenizer.json read key by key, so that an
// error names the key at fault (where.key) and says what it wants.
type fields struct {
	where string
	m     map[string]json.RawMessage
}

func objectFields(data json.RawMessage, where string) (fields, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return fields{}, fmt.Errorf("%s: want an object, got %.60s", where, data)
	}
	return fields{where: where, m: m}, nil
}

func (f fields) key(k string) string { return f.where + "." + k }

// has reports whether the object sets k, to null or to anything else.
func (f fields) has(k string) bool {
	_, ok := f.m[k]
	return ok
}

// missing is the error for a key the object must set.
func (f fields) missing(k string) error { return fmt.Errorf("%s is missing", f.key(k)) }

// boolean reads a required true or false.
func (f fields) boolean(k string) (bool, error) {
	v, ok := f.m[k]
	if !ok || isNull(v) {
		return false, f.missing(k)
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return false, fmt.Errorf("%s: want true or false, got %.60s", f.key(k), v)
	}
	return b, nil
}

// optBoolean reads true, false or null (nil), absent being null.
func (f fields) optBoolean(k string) (*bool, error) {
	v, ok := f.m[k]
	if !ok || isNull(v) {
		return nil, nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return nil, fmt.Errorf("%s: want true, false or null, got %.60s", f.key(k), v)
	}
	return &b, nil
}

// str reads a required string.
func (f fields) str(k string) (string, error) {
	v, ok := f.m[k]
	if !ok || isNull(v) {
		return "", f.missing(k)
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("%s: want a string, got %.60s", f.key(k), v)
	}
	return s, nil
}

// count reads a required non-negative integer; values past the largest
// int are read as the largest int.
func (f fields) count(k string) (int, error) {
	v, ok := f.m[k]
	if !ok || isNull(v) {
		return 0, f.missing(k)
	}
	u, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return math.MaxInt, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: want a non-negative integer, got %.60s", f.key(k), v)
	}
	return int(min(u, math.MaxInt)), nil
}

// vocabulary reads a required {"token": id} object with ids from 0 to
// the largest int32.
func (f fields) vocabulary(k string) (map[string]int32, error) {
	v, ok := f.m[k]
	if !ok || isNull(v) {
		return nil, f.missing(k)
	}
	var ids map[string]int64
	if err := json.Unmarshal(v, &ids); err == nil && ids != nil {
		vocab := make(map[string]int32, len(ids))
		for tok, id := range ids {
			if id < 0 || id > math.MaxInt32 {
				return nil, fmt.Errorf("%s: token %q: want an id from 0 to %d, got %d", f.key(k), tok, math.MaxInt32, id)
			}
			vocab[tok] = int32(id)
		}
		return vocab, nil
	}
	// Read it again key by key, to name the entry at fault.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("%s: want an object of token ids, got %.60s", f.key(k), v)
	}
	vocab := make(map[string]int32, len(raw))
	for tok, idv := range raw {
		var id int64
		if err := json.Unmarshal(idv, &id); err != nil || id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("%s: token %q: want an id from 0 to %d, got %.60s", f.key(k), tok, math.MaxInt32, idv)
		}
		vocab[tok] = int32(id)
	}
	return vocab, nil
}
