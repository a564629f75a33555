package reply_test

import (
	"encoding/json"
	"fmt"

	"github.com/archgen/archgen/tokenizer/chat/reply"
)

// A reply of a Qwen3-style model, pushed in pieces as a decoder streams
// it: reasoning, a word of content, and a call.
func ExampleSpec_NewParser() {
	spec, _ := reply.Detect(reply.Inputs{
		Template: `{{- '<tool_call>\n{"name": "' }}{{- tool_call.name }}`,
		HasToken: func(s string) bool { return s == "<think>" || s == "</think>" },
	})
	p := spec.NewParser(reply.ParserOptions{
		Tools: []reply.Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object"}`)}},
	})
	pieces := []string{"<thi", "nk>\nRain?\n</th", "ink>\n\nChecking.\n<tool", "_call>\n{\"name\": \"get_weather\", ",
		"\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}
	for _, piece := range pieces {
		d := p.Push(piece)
		fmt.Printf("%q %q %v\n", d.Reasoning, d.Content, d.Calls)
	}
	d := p.Finish()
	fmt.Printf("%q %q %v\n", d.Reasoning, d.Content, d.Calls)
	// Output:
	// "" "" []
	// "Rain?" "" []
	// "" "Checking." []
	// "" "" []
	// "" "" [{ get_weather {"city":"Paris"}}]
	// "" "" []
}
