package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/archgen/archgen"
)

const chatHelp = `commands:
  /system TEXT  set the system prompt (the cache is kept up to where it changes)
  /reset        forget the conversation and empty the cache
  /save FILE    save the cache and the conversation (mlx-lm's prompt-cache format)
  /load FILE    load a cache and conversation /save wrote
  /help         this list
  /quit         leave (so do end of input and Ctrl-D)
Ctrl-C stops an answer; a second Ctrl-C, or one at the prompt, quits.
`

// Metadata keys of a saved chat, beside those Session.Save writes.
const (
	messagesKey = "archgen_messages"
	systemKey   = "archgen_system"
)

func (a *app) chat(args []string) error {
	fs := a.flags("chat", "-model PATH [flags]",
		"Talks with a model: each line read is a user message, answered with the model's chat template.\n"+
			"The KV cache is kept across turns, so each turn processes only its new tokens; the line after\n"+
			"each answer gives the prompt tokens processed and those the cache held.\n\n"+chatHelp)
	var f genFlags
	f.define(fs.FlagSet)
	if err := a.parse(fs, args); err != nil {
		return err
	}
	if err := f.check(fs.FlagSet); err != nil {
		return err
	}
	intr := newInterrupts()
	defer intr.stop()
	ctx, done := intr.turn()
	m, err := f.src.load(ctx, true)
	if err == nil {
		if err = m.CheckGenerative(); err != nil {
			m.Free()
		}
	}
	interrupted := ctx.Err() != nil // before done, which ends the turn's context
	done()
	if err != nil {
		if interrupted {
			return errInterrupted
		}
		return err
	}
	defer m.Free()
	if m.Template == nil {
		return fmt.Errorf("%s: the tokenizer has no chat template, which archrun chat needs (archrun generate -ignore-chat-template runs plain prompts)", m.Source.Path)
	}
	opts, err := f.options(m)
	if err != nil {
		return err
	}
	ctx, done = intr.turn()
	opts.Draft, err = f.loadDraft(ctx)
	done()
	if err != nil {
		return err
	}
	if opts.Draft != nil {
		defer opts.Draft.Free()
	}
	sess, err := m.NewSession(f.ko)
	if err != nil {
		return err
	}
	defer sess.Free()

	c := &chatState{app: a, m: m, sess: sess, system: f.system}
	interactive := false
	if in, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		interactive = true
		fmt.Fprintf(a.stderr, "archrun chat: %s (/help lists the commands)\n", m.Source.Path)
	}
	sc := bufio.NewScanner(a.stdin)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for {
		if interactive {
			fmt.Fprint(a.stdout, ">> ")
		}
		if !sc.Scan() {
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			if c.command(line) {
				return nil
			}
			continue
		}
		conv := c.conversation(archgen.Message{Role: "user", Content: line})
		ctx, done := intr.turn()
		res, err := a.turn(opts, func(o archgen.Options, onText func(string) error) (archgen.Result, error) {
			return sess.Chat(ctx, conv, o, onText)
		})
		done()
		switch {
		case errors.Is(err, context.Canceled):
			fmt.Fprintln(a.stderr, "[interrupted]")
		case err != nil:
			fmt.Fprintln(a.stderr, "archrun:", err)
			continue
		}
		c.msgs = append(c.msgs, archgen.Message{Role: "user", Content: line}, archgen.Message{Role: "assistant", Content: res.Text})
		if f.verbose {
			st := res.Stats
			fmt.Fprintf(a.stderr, "[prompt: %d tokens processed, %d cached, %.1f tok/s | generation: %d tokens, %.1f tok/s | %s]\n",
				res.Processed(), res.CachedTokens, st.PromptTPS(), st.Tokens, st.GenerateTPS(), res.Finish)
		}
	}
}

// chatState is a conversation in the REPL.
type chatState struct {
	*app
	m      *archgen.Model
	sess   *archgen.Session
	system string
	msgs   []archgen.Message // the turns so far, without the system prompt
}

// conversation is the system prompt, the turns so far and next.
func (c *chatState) conversation(next ...archgen.Message) []archgen.Message {
	var out []archgen.Message
	if c.system != "" {
		out = append(out, archgen.Message{Role: "system", Content: c.system})
	}
	out = append(out, c.msgs...)
	return append(out, next...)
}

// command runs a /command; it reports whether the REPL should end.
func (c *chatState) command(line string) bool {
	name, arg, _ := strings.Cut(strings.TrimPrefix(line, "/"), " ")
	arg = strings.TrimSpace(arg)
	say := func(format string, args ...any) { fmt.Fprintf(c.stderr, "["+format+"]\n", args...) }
	fail := func(err error) { fmt.Fprintln(c.stderr, "archrun:", err) }
	switch name {
	case "quit", "exit", "q":
		return true
	case "help", "h", "?":
		fmt.Fprint(c.stderr, chatHelp)
	case "reset":
		c.sess.Reset()
		c.msgs = nil
		say("conversation reset")
	case "system":
		c.system = arg
		if arg == "" {
			say("system prompt removed")
		} else {
			say("system prompt set")
		}
	case "save":
		if arg == "" {
			fail(errors.New("/save needs a file name"))
			break
		}
		b, _ := json.Marshal(c.msgs)
		meta := map[string]string{messagesKey: string(b), systemKey: c.system}
		if err := c.sess.Save(arg, meta); err != nil {
			fail(err)
			break
		}
		say("saved %d tokens and %d messages to %s", c.sess.Cached(), len(c.msgs), arg)
	case "load":
		if arg == "" {
			fail(errors.New("/load needs a file name"))
			break
		}
		meta, err := c.sess.Load(arg)
		if err != nil {
			fail(err)
			break
		}
		raw, ok := meta[messagesKey]
		var msgs []archgen.Message
		if !ok || len(c.sess.Tokens()) != c.sess.Cached() || json.Unmarshal([]byte(raw), &msgs) != nil {
			c.sess.Reset()
			c.msgs = nil
			fail(fmt.Errorf("%s holds a prompt cache but not the conversation it came from (archrun chat's /save writes both; mlx_lm.cache_prompt does not): continue it with archrun generate -prompt-cache-file %s", arg, arg))
			break
		}
		c.msgs, c.system = msgs, meta[systemKey]
		say("loaded %d tokens and %d messages from %s", c.sess.Cached(), len(msgs), arg)
	default:
		fail(fmt.Errorf("unknown command /%s (/help lists them)", name))
	}
	return false
}
