package chat_test

import (
	"fmt"

	"github.com/archgen/archgen/tokenizer/chat"
)

// A ChatML template, as SmolLM2 and Qwen ship it (shortened), rendered for
// the model to answer.
func Example() {
	t, err := chat.Compile(`{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	text, err := t.Render([]chat.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hello!"},
	}, chat.Options{AddGenerationPrompt: true})
	fmt.Printf("%s(%v)\n", text, err)
	// Output:
	// <|im_start|>system
	// Be brief.<|im_end|>
	// <|im_start|>user
	// Hello!<|im_end|>
	// <|im_start|>assistant
	// (<nil>)
}

// Vars passes further variables, as apply_chat_template's keyword
// arguments do.
func ExampleOptions_vars() {
	t, _ := chat.Compile(`{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{{ messages[0].content }}`)
	text, err := t.Render([]chat.Message{{Role: "user", Content: "Hi"}}, chat.Options{Vars: map[string]any{"enable_thinking": false}})
	fmt.Println(text, err)
	// Output:
	// <think></think>Hi <nil>
}
