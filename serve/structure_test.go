package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/archgen/archgen"
)

// TestStructuredErrors: each field that constrains a reply's form, and each
// tool field, refuses what it cannot take with a 400 (or 422) naming the
// field, on a model whose template has no tool-call format.
func TestStructuredErrors(t *testing.T) {
	dir, _ := tinyChatWithTemplate(t, func(old string) any { return old })
	srv := serveTiny(t, dir, archgen.LoadOptions{})
	const msgs = `"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2`
	const tool = `{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}`
	for _, c := range []struct {
		path, body  string
		status      int
		param, code string
		msgFragment string
	}{
		{"/v1/chat/completions", `{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "wat"}}}}`,
			400, "response_format.json_schema.schema", "invalid_schema", "Invalid type: wat"},
		{"/v1/chat/completions", `{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": true}}}}`,
			400, "response_format.json_schema.schema", "invalid_schema", "uniqueItems"},
		{"/v1/chat/completions", `{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}`,
			400, "response_format.json_schema.schema", "invalid_value", "missing"},
		{"/v1/chat/completions", `{` + msgs + `, "response_format": {"type": "xml"}}`,
			400, "response_format.type", "invalid_value", `"xml", want text, json_object or json_schema`},
		{"/v1/chat/completions", `{` + msgs + `, "response_format": {"type": "json_object"}, "guided_regex": "a+"}`,
			400, "guided_regex", "invalid_value", "a request takes one of"},
		{"/v1/completions", `{"prompt": "hi", "grammar": "root ::= [a-"}`, 400, "grammar", "invalid_grammar", "GBNF grammar: line 1"},
		{"/v1/completions", `{"prompt": "hi", "grammar": "%llguidance\nstart: foo"}`, 400, "grammar", "invalid_grammar", "Lark grammar"},
		{"/v1/completions", `{"prompt": "hi", "guided_regex": "[a-"}`, 400, "guided_regex", "invalid_grammar", "unclosed character class"},
		{"/v1/completions", `{"prompt": "hi", "guided_json": {"type": 7}}`, 400, "guided_json", "invalid_schema", "JSON schema"},
		{"/v1/completions", `{"prompt": "hi", "guided_choice": []}`, 400, "guided_choice", "invalid_value", "empty"},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [{"type": "function", "function": {}}]}`,
			400, "tools[0].function.name", "invalid_value", "want a non-empty string"},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [{"type": "retrieval"}]}`,
			422, "tools[0].type", "unsupported_value", "function tools alone"},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [` + tool + `], "tool_choice": "always"}`,
			400, "tool_choice", "invalid_value", `"always", want none, auto, required or a function`},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [` + tool + `], "tool_choice": {"type": "function", "function": {"name": "g"}}}`,
			400, "tool_choice", "invalid_value", `function "g" is not among the request's tools`},
		{"/v1/chat/completions", `{` + msgs + `, "tool_choice": "required"}`, 400, "tool_choice", "invalid_value", "required needs tools"},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [` + tool + `], "tool_choice": "required"}`,
			422, "tool_choice", "unsupported_value", "writes calls in none this server knows"},
		{"/v1/chat/completions", `{` + msgs + `, "tools": [` + tool + `], "tool_choice": "required", "response_format": {"type": "json_object"}}`,
			400, "tool_choice", "invalid_value", "would contradict"},
		{"/v1/responses", `{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "wat"}}}}`,
			400, "text.format.schema", "invalid_schema", "Invalid type: wat"},
		{"/v1/messages", `{` + msgs + `, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}}`,
			422, "tool_choice", "unsupported_value", "writes calls in none this server knows"},
		{"/v1/messages", `{` + msgs + `, "tool_choice": {"type": "tool", "name": "g"}}`,
			400, "tool_choice", "invalid_value", `function "g" is not among the request's tools`},
	} {
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(c.body))
		require.NoError(t, err)
		var out struct {
			Error struct{ Message, Param, Code string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		assert.Equal(t, c.status, resp.StatusCode, c.body)
		assert.Equal(t, c.param, out.Error.Param, c.body)
		assert.Equal(t, c.code, out.Error.Code, c.body)
		assert.Contains(t, out.Error.Message, c.msgFragment, c.body)
	}
}
