package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/ardanlabs/jinja"
)

// toValue converts a Go value for the template. json.RawMessage keeps the
// key order of its objects (tojson prints keys in that order, as Python's
// dicts do); Go maps are read in sorted key order.
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return decodeJSON(x)
	case []byte:
		return jinja.NewString(string(x)), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case uint32:
		return jinja.NewInt(int64(x)), nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, it := range x {
			val, err := toValue(it)
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = val
		}
		return jinja.NewList(items), nil
	case []json.RawMessage:
		items := make([]jinja.Value, len(x))
		for i, it := range x {
			val, err := decodeJSON(it)
			if err != nil {
				return jinja.Value{}, err
			}
			items[i] = val
		}
		return jinja.NewList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			val, err := toValue(x[k])
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, val)
		}
		return d, nil
	}
	return jinja.FromGoValue(v), nil
}

// decodeJSON reads JSON into template values, objects in key order and
// integers as integers.
func decodeJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, fmt.Errorf("chat: JSON value: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Value{}, fmt.Errorf("chat: JSON value: data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(kt.(string), val)
			}
			_, err := dec.Token() // }
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, val)
			}
			_, err := dec.Token() // ]
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", t)
	}
	return jinja.FromGoValue(tok), nil
}
