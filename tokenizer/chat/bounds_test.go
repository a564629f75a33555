package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/archgen/archgen/tokenizer"
	"github.com/archgen/archgen/tokenizer/internal/reftest"
)

// testBounds are small enough that each hostile template below passes
// one of them quickly.
var testBounds = Bounds{Time: time.Second, Output: 1 << 20, Memory: 256 << 20, Stack: 8 << 20, Renderers: 2}

// hostileTemplates each break one bound (at parse when parse is set; a
// deep parse may pass either of two bounds first).
var hostileTemplates = []struct {
	name, src, bound string
	parse            bool
}{
	{"nested loops", `{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}`, "time", false},
	{"recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "recursion", false},
	{"string repeat", `{{ 'a' * 2000000000 }}`, "memory", false},
	{"doubling string", `{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}`, "memory", false},
	{"huge range", `{{ range(1000000000) | length }}`, "memory", false},
	{"long output", `{% for m in messages %}{{ m.content * 300000 }}{% endfor %}`, "output", false},
	{"negative repeat", `{{ 'a' * -1 }}`, "crash", false},
	{"deep parentheses", `{{ ` + strings.Repeat("(", 200000) + `1` + strings.Repeat(")", 200000) + ` }}`, "recursion|memory", true},
}

// TestBoundedTemplates renders templates that would hang, crash or
// exhaust the process rendering them in process, and checks that each
// comes back as a *BoundError naming the bound, within the time bound,
// and that a plain render works after each.
func TestBoundedTemplates(t *testing.T) {
	plain, err := CompileBounded("plain.jinja", `{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}`, testBounds)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "hello"}}
	for _, h := range hostileTemplates {
		t.Run(h.name, func(t *testing.T) {
			start := time.Now()
			tmpl, err := CompileBounded("hostile.jinja", h.src, testBounds)
			if !h.parse {
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				_, err = tmpl.Render(msgs, Options{})
			}
			var be *BoundError
			if !errors.As(err, &be) {
				t.Fatalf("want a *BoundError, got %v", err)
			}
			if !slices.Contains(strings.Split(h.bound, "|"), be.Bound) || be.Template != "hostile.jinja" {
				t.Errorf("got bound %q of %q (%v), want %q of hostile.jinja", be.Bound, be.Template, err, h.bound)
			}
			if !strings.Contains(err.Error(), "hostile.jinja") {
				t.Errorf("the error does not name the template: %v", err)
			}
			if took := time.Since(start); took > testBounds.Time+5*time.Second {
				t.Errorf("took %v, the time bound is %v", took, testBounds.Time)
			}
			got, err := plain.Render(msgs, Options{})
			if err != nil || got != "<user>hello" {
				t.Errorf("the next render gave %q, %v", got, err)
			}
		})
	}
}

// TestBoundedErrors checks that a template's own errors come back as they
// do in process, not as bound errors.
func TestBoundedErrors(t *testing.T) {
	if _, err := CompileBounded("t", "", testBounds); err == nil {
		t.Error("an empty template compiled")
	}
	_, err := CompileBounded("t", "{% for m in messages %}", testBounds)
	_, want := Compile("{% for m in messages %}")
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("missing endfor: got %v, in process %v", err, want)
	}
	tmpl, err := CompileBounded("t", `{{ raise_exception("no system role") }}`, testBounds)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(nil, Options{})
	var be *BoundError
	if err == nil || !strings.Contains(err.Error(), "no system role") || errors.As(err, &be) {
		t.Errorf("raise_exception gave %v", err)
	}
	if _, err := tmpl.RenderMaps([]any{json.RawMessage(`{"role": `)}, Options{}); err == nil {
		t.Error("broken JSON rendered")
	}
}

// TestBoundedValues renders the same variables in process and bounded:
// the values cross to the renderer as JSON and must read back the same.
func TestBoundedValues(t *testing.T) {
	src := `{{ messages | tojson }}|{{ tools | tojson }}|{{ x }} {{ y }} {{ z }} {{ w }} {{ flag }} {{ none is none }}|{{ m | tojson }}`
	in, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := CompileBounded("values", src, testBounds)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []any{json.RawMessage(`{"role": "user", "content": "é \u2028 \"q\"", "z": 1, "a": [1.5, 2.0, null]}`),
		map[string]any{"role": "assistant", "content": "x", "n": 3}}
	o := Options{
		Tools: []any{json.RawMessage(`{"type": "function", "b": 1e3, "a": 9007199254740993}`)},
		Vars: map[string]any{"x": 1.0, "y": float32(2.5), "z": 7, "w": int32(-3), "flag": true,
			"m": map[string]any{"b": []any{1, "two", 3.25, false}, "a": nil}},
	}
	want, err := in.RenderMaps(msgs, o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := out.RenderMaps(msgs, o)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("bounded\n%s\nin process\n%s", got, want)
	}
}

// TestBoundedRange renders range in its every form bounded and in process:
// the bounded renderer's own range must give what the engine's gives.
func TestBoundedRange(t *testing.T) {
	for _, args := range []string{"5", "0", "-3", "2, 9", "9, 2", "2, 10, 3", "10, 2, -3", "10, -10, -7",
		"-9223372036854775807, -9223372036854775800, 3", "9223372036854775800, 9223372036854775807",
		"2.9", "true", "'7'", "'x'", "none", "3, 0, -1", "n", "n, n + 4, 2"} {
		src := `{{ range(` + args + `) | tojson }}|{{ range(` + args + `) | length }}`
		in, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := CompileBounded("range", src, testBounds)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Vars: map[string]any{"n": 4}}
		want, wantErr := in.RenderMaps(nil, o)
		got, err := out.RenderMaps(nil, o)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("range(%s): bounded %q, %v; in process %q, %v", args, got, err, want, wantErr)
		}
	}
	for _, args := range []string{"", "1, 2, 3, 4", "1, 5, 0"} {
		src := `{{ range(` + args + `) }}`
		in, _ := Compile(src)
		out, err := CompileBounded("range", src, testBounds)
		if err != nil {
			t.Fatal(err)
		}
		_, wantErr := in.RenderMaps(nil, Options{})
		_, err = out.RenderMaps(nil, Options{})
		if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
			t.Errorf("range(%s): bounded %v, in process %v", args, err, wantErr)
		}
	}
}

// TestBoundedConcurrent renders from many goroutines at once through two
// renderers.
func TestBoundedConcurrent(t *testing.T) {
	tmpl, err := CompileBounded("t", `{% for m in messages %}{{ m.content }};{% endfor %}`, testBounds)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				c := fmt.Sprintf("%d-%d", g, i)
				got, err := tmpl.Render([]Message{{Role: "user", Content: c}}, Options{})
				if err == nil && got != c+";" {
					err = fmt.Errorf("got %q, want %q", got, c+";")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// FuzzBoundedTemplates renders arbitrary templates over an arbitrary
// message in bounded renderers: every outcome is text or an error, never
// a crash of this process or a render past its time.
func FuzzBoundedTemplates(f *testing.F) {
	for _, h := range hostileTemplates {
		if len(h.src) < 1000 {
			f.Add(h.src, "hi")
		}
	}
	f.Add(`{% for m in messages %}{{ m.role }}: {{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% endfor %}`, " a ")
	f.Add(`{{ messages[0].content | tojson }}{{ bos_token ~ eos_token }}{% if add_generation_prompt %}>{% endif %}`, `"q"`)
	f.Add(`{% set x = messages[0].content.split(' ') %}{{ x | join('|') }}{{ x[1:] }}{{ (x | length) * 3 }}`, "a b c")
	b := Bounds{Time: time.Second, Output: 1 << 20, Memory: 256 << 20, Stack: 8 << 20, Renderers: 1}
	f.Fuzz(func(t *testing.T, src, content string) {
		start := time.Now()
		tmpl, err := CompileBounded("fuzz", src, b)
		if err == nil {
			_, err = tmpl.Render([]Message{{Role: "user", Content: content}}, Options{AddGenerationPrompt: true})
		}
		if errors.Is(err, ErrRenderer) {
			t.Fatalf("the renderer failed: %v", err)
		}
		if took := time.Since(start); took > 2*b.Time+5*time.Second {
			t.Fatalf("took %v", took)
		}
	})
}

// BenchmarkRender renders a 32-message conversation with Qwen3's template
// in process and in a bounded renderer: the difference is what a bound
// costs each chat request.
func BenchmarkRender(b *testing.B) {
	folder, err := reftest.Folder("qwen3")
	if err != nil {
		b.Fatal(err)
	}
	p, err := tokenizer.Load(folder)
	if err != nil {
		b.Fatal(err)
	}
	var msgs []Message
	for i := range 32 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, Message{Role: role, Content: strings.Repeat(fmt.Sprintf("turn %d says something. ", i), 20)})
	}
	for _, bounded := range []bool{false, true} {
		name := "in-process"
		var tmpl *Template
		if bounded {
			name = "bounded"
			tmpl, err = CompileBounded("qwen3", p.Config.ChatTemplate, Bounds{})
		} else {
			tmpl, err = Compile(p.Config.ChatTemplate)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
