package gen

import "testing"

// TestWrapperRefuseErrors: wrapper.refuse names section model_types whose
// architecture has no descriptor; naming one that has a descriptor, or one
// that dispatch also names, is a file:line error.
func TestWrapperRefuseErrors(t *testing.T) {
	for _, c := range []struct{ name, wrapper, want string }{
		{"wrapper refusing a model_type with a descriptor", "  refuse: [x, a]\n",
			`descriptors/w.yaml:6: wrapper.refuse[1]: "a" has a descriptor: dispatch it (wrapper.dispatch) instead of refusing it`},
		{"wrapper refusing a model_type it dispatches", "  dispatch: {x: a}\n  refuse: [x]\n",
			`descriptors/w.yaml:7: wrapper.refuse[0]: "x" is dispatched (wrapper.dispatch.x), not refused`},
		{"wrapper refusing an empty model_type", "  refuse: [\"\"]\n",
			`descriptors/w.yaml:6: wrapper.refuse[0]: want a model_type`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve(map[string][]byte{
				"descriptors/a.yaml": []byte(base),
				"descriptors/w.yaml": []byte("model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n" + c.wrapper),
			})
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n%v\nwant\n%s", err, c.want)
			}
		})
	}
	s, err := Resolve(map[string][]byte{
		"descriptors/a.yaml": []byte(base),
		"descriptors/w.yaml": []byte("model_type: w\ndoc: W.\nwrapper:\n  section: text_config\n  runs: a\n  refuse: [x, y]\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.wrapper("w"); w == nil || len(w.Refuse) != 2 || w.Refuse[0] != "x" || w.Refuse[1] != "y" {
		t.Fatalf("refuse not resolved: %+v", w)
	}
}
