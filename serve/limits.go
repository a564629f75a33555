package serve

import (
	"fmt"
	"net/http"
	"time"
)

// Limits bound what one request may ask of the server. A zero field takes
// DefaultLimits' value; a negative one lifts the bound (where a bound can
// be lifted: the body's never is).
type Limits struct {
	// BodyBytes bounds a request's body (413 request_too_large past it).
	BodyBytes int64
	// Messages bounds a chat's messages.
	Messages int
	// Tools bounds a chat's tools.
	Tools int
	// PromptTokens bounds a prompt's tokens after the chat template (the
	// model's context bounds it anyway).
	PromptTokens int
	// MaxTokens bounds what max_tokens (or max_completion_tokens) may ask
	// (the context left after the prompt bounds it anyway).
	MaxTokens int
	// Stops bounds the stop strings, StopBytes each one's length.
	Stops, StopBytes int
	// BodyTimeout bounds the time a client takes to send its body once
	// its headers are in (408 request_timeout past it).
	BodyTimeout time.Duration
}

// DefaultLimits are the bounds a server starts with: a body of 16 MiB, 2048
// messages, OpenAI's 128 tools, 16 stop strings of at most 1 KiB each, and
// a minute for the body; prompt and max_tokens bounded by the context
// alone.
var DefaultLimits = Limits{
	BodyBytes:    16 << 20,
	Messages:     2048,
	Tools:        128,
	PromptTokens: -1,
	MaxTokens:    -1,
	Stops:        16,
	StopBytes:    1024,
	BodyTimeout:  time.Minute,
}

// withDefaults fills l's zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.BodyBytes <= 0 {
		l.BodyBytes = d.BodyBytes
	}
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&l.Messages, d.Messages)
	pick(&l.Tools, d.Tools)
	pick(&l.PromptTokens, d.PromptTokens)
	pick(&l.MaxTokens, d.MaxTokens)
	pick(&l.Stops, d.Stops)
	pick(&l.StopBytes, d.StopBytes)
	if l.BodyTimeout == 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	return l
}

// over is the 400 for a field past the server's limit: code
// limit_exceeded, the field as its param.
func over(param string, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: "limit_exceeded",
		Message: fmt.Sprintf(format, args...)}
}
