package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/archgen/archgen/internal/tinychat"
)

// smolLM2 is the real checkpoint `make models` fetches.
const smolLM2 = "../../.deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"

// tiny writes a tiny chat checkpoint (internal/tinychat) with config merged
// into its config.json.
func tiny(t *testing.T, config map[string]any) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-chat")
	require.NoError(t, tinychat.Write(dir, config, nil))
	return dir
}

// TestHelp: -h, -help, --help and help, at the top and for each command,
// print help to stdout and succeed.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"-help"}, {"help"},
		{"help", "generate"}, {"generate", "-h"}, {"generate", "--help"}, {"generate", "help"},
		{"chat", "-h"}, {"help", "chat"}, {"logits", "--help"}, {"greedy", "-h"}, {"convert", "-h"}, {"list", "-h"},
		{"serve", "-h"}, {"help", "serve"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(args, &stdout, &stderr)
		assert.ErrorIs(t, err, errHelp, "%q", args)
		assert.Contains(t, stdout.String(), "usage: archrun", "%q", args)
		assert.Empty(t, stderr.String(), "%q", args)
		if len(args) == 2 {
			cmd := args[0]
			if cmd == "help" {
				cmd = args[1]
			}
			assert.Contains(t, stdout.String(), "usage: archrun "+cmd+" ", "%q", args)
		}
	}
	var help bytes.Buffer
	require.ErrorIs(t, run([]string{"generate", "-h"}, &help, nil), errHelp)
	assert.Contains(t, help.String(), "-prompt-cache-file")
	err := run([]string{"generate", "-x"}, nil, nil)
	var u usageError
	assert.ErrorAs(t, err, &u)
	assert.EqualError(t, err, `flag provided but not defined: -x ("archrun generate -h" lists the flags)`)
}

// TestFlagsCheckedBeforeLoading: bad sampling and template flags are usage
// errors even when the model path does not exist.
func TestFlagsCheckedBeforeLoading(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-temp", "-1"}, "temperature -1 must be finite and >= 0"},
		{[]string{"-top-p", "1.5"}, "top-p 1.5 must be in [0, 1]"},
		{[]string{"-min-p", "-0.1"}, "min-p -0.1 must be in [0, 1]"},
		{[]string{"-top-k", "-3"}, "top-k -3 must be in (0, 0)"},
		{[]string{"-repetition-penalty", "-2"}, "repetition penalty -2 must be >= 0"},
		{[]string{"-chat-template-config", "enable_thinking=false"}, `-chat-template-config "enable_thinking=false": want a JSON object, such as {"enable_thinking": false}`},
		{[]string{"-n", "0"}, "-max-tokens 0: want at least 1"},
		{[]string{"-prefill-step-size", "0"}, "-prefill-step-size 0: want at least 1"},
		{[]string{"-kv-bits", "5", "-kv-group-size", "7"}, "kv"},
		{[]string{"-kv-dtype", "int8"}, `-kv-dtype "int8": want float32, bfloat16 or float16`},
		{[]string{"-template-time", "0s"}, "-template-time 0s: want a positive duration"},
		{[]string{"-template-memory", "0"}, `-template-memory "0": want a positive size (512MiB, 4MiB, bytes)`},
		{[]string{"-template-output", "lots"}, `-template-output "lots": want a positive size (512MiB, 4MiB, bytes)`},
	} {
		for _, cmd := range []string{"generate", "chat"} {
			args := append([]string{cmd, "-m", missing, "-p", "hi"}, c.args...)
			if cmd == "chat" {
				args = append([]string{cmd, "-m", missing}, c.args...)
			}
			err := run(args, nil, nil)
			var u usageError
			if assert.ErrorAs(t, err, &u, "%q", args) {
				assert.Contains(t, err.Error(), c.want, "%q", args)
			}
		}
	}
}

// TestDefaultSeed: sampling without -seed differs from run to run, as
// mlx-lm's does; with -seed it repeats.
func TestDefaultSeed(t *testing.T) {
	dir := tiny(t, nil)
	gen := func(extra ...string) string {
		var out bytes.Buffer
		args := append([]string{"generate", "-m", dir, "-p", "abc", "-temp", "1", "-n", "24", "-verbose=false"}, extra...)
		require.NoError(t, run(args, &out, nil))
		return out.String()
	}
	a, b := gen(), gen()
	assert.NotEqual(t, a, b, "two unseeded runs drew the same 24 tokens")
	assert.Equal(t, gen("-seed", "7"), gen("-seed", "7"))
	assert.Equal(t, gen("-seed", "0"), gen("-seed", "0"))
}

// TestEOSListStops: a token config.json's eos_token_id list names (and the
// tokenizer does not) ends generation.
func TestEOSListStops(t *testing.T) {
	dir := tiny(t, nil)
	var out bytes.Buffer
	require.NoError(t, run([]string{"greedy", "-model", dir, "-tokens", "254,251,117,115,101,114,10,104,105,252,10,251,97,115,115,105,115,116,97,110,116,10", "-n", "1"}, &out, nil))
	first, err := strconv.Atoi(strings.TrimSpace(out.String()))
	require.NoError(t, err)
	listed := tiny(t, map[string]any{"eos_token_id": []int{tinychat.EndOfText, first}})
	var stderr bytes.Buffer
	out.Reset()
	require.NoError(t, run([]string{"generate", "-m", listed, "-p", "hi", "-n", "8"}, &out, &stderr))
	assert.Equal(t, "\n", out.String())
	assert.Contains(t, stderr.String(), "Generation: 0 tokens")
	// The chat's prompt is the one greedy was given above.
	stderr.Reset()
	require.NoError(t, run([]string{"generate", "-m", dir, "-p", "hi", "-n", "8"}, &out, &stderr))
	assert.Contains(t, stderr.String(), "Generation: 8 tokens")
}

// TestModelErrors: what -model takes and the errors that say what to pass.
func TestModelErrors(t *testing.T) {
	dir := tiny(t, nil)
	hub := filepath.Join(t.TempDir(), "hub")
	snap := filepath.Join(hub, "models--org--tiny", "snapshots", "abc")
	require.NoError(t, tinychat.Write(snap, nil, nil))
	require.NoError(t, os.MkdirAll(filepath.Join(hub, "models--org--tiny", "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hub, "models--org--tiny", "refs", "main"), []byte("abc\n"), 0o644))
	t.Setenv("HF_HUB_CACHE", hub)
	noTok := tiny(t, nil)
	require.NoError(t, os.Remove(filepath.Join(noTok, "tokenizer.json")))
	for _, c := range []struct {
		model, want string
	}{
		{filepath.Dir(dir), filepath.Dir(dir) + " has no config.json: a model directory holds config.json"},
		{hub, hub + " is a Hugging Face cache, not a model: pass a repo id (org/tiny)"},
		{noTok, noTok + ": no tokenizer.json"},
	} {
		err := run([]string{"generate", "-m", c.model, "-p", "hi"}, nil, nil)
		if assert.Error(t, err, c.model) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	for _, model := range []string{"org/tiny", filepath.Join(hub, "models--org--tiny"), smolLM2} {
		assert.NoError(t, run([]string{"generate", "-m", model, "-p", "hi", "-n", "2"}, nil, nil), model)
	}
	err := run([]string{"generate", "-gguf", dir, "-p", "hi"}, nil, nil)
	assert.EqualError(t, err, "-gguf "+dir+": a directory; -gguf takes a .gguf file (pass a directory with -model)")
}

var turnLine = regexp.MustCompile(`\[prompt: (\d+) tokens processed, (\d+) cached, [0-9.]+ tok/s \| generation: (\d+) tokens, [0-9.]+ tok/s \| (\w+)\]`)

// turns are the per-turn lines of a chat's stderr: processed, cached,
// generated.
func turns(t *testing.T, stderr string) [][3]int {
	var out [][3]int
	for _, m := range turnLine.FindAllStringSubmatch(stderr, -1) {
		var v [3]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		out = append(out, v)
	}
	return out
}

// TestChatREPL drives archrun chat on the real checkpoint through its
// standard input: the second turn processes only its new tokens, the cache
// holding the first; /reset empties it; /save and /load carry it over;
// /system changes the prompt's start.
func TestChatREPL(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chat.safetensors")
	in := strings.Join([]string{
		"What is the capital of France?",
		"And of Italy?",
		"/save " + file,
		"/reset",
		"What is the capital of Spain?",
		"/load " + file,
		"And of Germany?",
		"/system You answer in one word.",
		"And of Japan?",
		"/bogus",
		"/save",
	}, "\n") + "\n"
	var stdout, stderr bytes.Buffer
	err := runIO([]string{"chat", "-m", smolLM2, "-n", "24"}, strings.NewReader(in), &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	ts := turns(t, stderr.String())
	require.Len(t, ts, 5, stderr.String())
	first, second, afterReset, afterLoad, afterSystem := ts[0], ts[1], ts[2], ts[3], ts[4]
	assert.Equal(t, 0, first[1], "the first turn has nothing cached")
	// The cache holds the first turn: its prompt and every token generated
	// (the stop token too, or all but the last when the budget ended it).
	held := first[0] + first[2]
	assert.GreaterOrEqual(t, second[1], held-1)
	assert.LessOrEqual(t, second[1], held+1)
	assert.Less(t, second[0], first[0], "the second turn processes only its own tokens")
	assert.Equal(t, 0, afterReset[1], "/reset empties the cache")
	assert.InDelta(t, first[0], afterReset[0], 2, "after /reset a one-turn chat costs about what the first did")
	assert.InDelta(t, second[0]+second[1]+second[2], afterLoad[1], 1, "/load restores the two-turn cache")
	assert.Less(t, afterSystem[1], 10, "a new system prompt changes the start: little is reused")
	assert.Contains(t, stderr.String(), "[saved ")
	assert.Contains(t, stderr.String(), "[loaded ")
	assert.Contains(t, stderr.String(), "archrun: unknown command /bogus (/help lists them)")
	assert.Contains(t, stderr.String(), "archrun: /save needs a file name")
	assert.Contains(t, stdout.String(), "Paris")
}

// binDir holds the binary buildArchrun builds; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	runAsArchrun()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildArchrun builds the real binary once.
var buildArchrun = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "archrun-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "archrun")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// openPTY opens a pseudo-terminal: the controlling side and the terminal.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	return ptmx, tty
}

// longPrompt is a prompt of a few thousand tokens.
func longPrompt(t *testing.T) string {
	words := strings.Fields("the quick brown fox jumps over a lazy dog by the river under the mountain near the city lights")
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		b.WriteString(words[(i*7)%len(words)])
		b.WriteByte(' ')
	}
	p := filepath.Join(t.TempDir(), "prompt.txt")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// interruptRun starts archrun generate on the real checkpoint with a long
// prompt, its stderr a terminal, and sends SIGINT (count times, a moment
// apart) once the progress line shows the prompt under way. It returns the
// exit status, what the terminal showed and how long the process took to
// end after the first signal.
func interruptRun(t *testing.T, count int, step string) (int, string, time.Duration) {
	bin, err := buildArchrun()
	require.NoError(t, err)
	ptmx, tty := openPTY(t)
	var stdout bytes.Buffer
	cmd := exec.Command(bin, "generate", "-m", smolLM2, "-f", longPrompt(t), "-n", "8", "-prefill-step-size", step)
	cmd.Stdout, cmd.Stderr = &stdout, tty
	require.NoError(t, cmd.Start())
	var term bytes.Buffer
	var mu sync.Mutex
	progress := make(chan struct{})
	line := regexp.MustCompile(`prompt: \d+/\d+ tokens, [0-9.]+ tok/s`)
	go func() {
		once := sync.Once{}
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			term.Write(buf[:n])
			seen := line.Match(term.Bytes())
			mu.Unlock()
			if seen {
				once.Do(func() { close(progress) })
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-progress:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("no progress line within 5 minutes")
	}
	// The next chunk is under way now.
	time.Sleep(300 * time.Millisecond)
	sent := time.Now()
	for i := 0; i < count; i++ {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
	}
	err = cmd.Wait()
	took := time.Since(sent)
	tty.Close()
	time.Sleep(100 * time.Millisecond)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "archrun ended with %v", err)
	mu.Lock()
	defer mu.Unlock()
	return exit.ExitCode(), term.String() + stdout.String(), took
}

// TestInterruptMidPrefill: Ctrl-C during a long prompt stops the real
// binary after the chunk under way (long before the prompt's end), prints
// how far the prompt got and exits 130 without an error message.
func TestInterruptMidPrefill(t *testing.T) {
	code, out, took := interruptRun(t, 1, "64")
	assert.Equal(t, 130, code, out)
	m := regexp.MustCompile(`Interrupted: prompt (\d+) of (\d+) tokens processed`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	done, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	assert.Greater(t, total, 2000)
	assert.Less(t, done, total/2, "the prompt stopped within a few chunks of the signal")
	assert.NotContains(t, out, "archrun:")
	assert.NotContains(t, out, "context canceled")
	t.Logf("exited %v after SIGINT; prompt %d of %d", took, done, total)
}

// TestSecondInterruptQuits: with chunks of half the prompt (1,536 of its
// 3,031 tokens: seconds each, long beside the half second between the
// signals, however fast a chunk of 256 goes), the first Ctrl-C would wait
// for the chunk under way; the second ends the process at once, before
// any figures.
func TestSecondInterruptQuits(t *testing.T) {
	code, out, took := interruptRun(t, 2, "1536")
	assert.NotContains(t, out, "Interrupted:", "the second signal ended the process before the chunk did")
	assert.Equal(t, 130, code, out)
	t.Logf("exited %v after the first SIGINT", took)
}

// venv is the project's Python, with mlx-lm.
func venv(t *testing.T, tool string) string {
	t.Helper()
	p, err := filepath.Abs("../../.deps/py/bin/" + tool)
	require.NoError(t, err)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the project venv is missing (%v): run `make setup-py`", err)
	}
	return p
}

// TestPromptCacheFilesWithMLXLM: generate -prompt-cache-file continues a
// cache mlx_lm.cache_prompt wrote as the whole prompt would; mlx_lm.generate
// continues a cache archrun chat's /save wrote with the same tokens archrun
// does; the mismatches are errors that say what to do.
func TestPromptCacheFilesWithMLXLM(t *testing.T) {
	dir := tiny(t, nil)
	tmp := t.TempDir()
	theirs := filepath.Join(tmp, "mlxlm.safetensors")
	out, err := exec.Command(venv(t, "mlx_lm.cache_prompt"), "--model", dir, "--prompt", "abc", "--prompt-cache-file", theirs).CombinedOutput()
	require.NoError(t, err, "%s", out)

	gen := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(append([]string{"generate", "-n", "8", "-verbose=false"}, args...), &stdout, &stderr), stderr.String())
		return stdout.String()
	}
	whole := gen("-m", dir, "-p", "abcdef")
	assert.Equal(t, whole, gen("-prompt-cache-file", theirs, "-p", "def"), "mlx-lm's cache of the prompt's start, then the rest")
	assert.Equal(t, whole, gen("-m", dir, "-prompt-cache-file", theirs, "-p", "def"))

	ours := filepath.Join(tmp, "ours.safetensors")
	var stdout, stderr bytes.Buffer
	require.NoError(t, runIO([]string{"chat", "-m", dir, "-n", "6"}, strings.NewReader("hello\n/save "+ours+"\n/load "+theirs+"\n"), &stdout, &stderr))
	assert.Contains(t, stderr.String(), theirs+" holds a prompt cache but not the conversation it came from")
	want := gen("-prompt-cache-file", ours, "-p", "more")
	got, err := exec.Command(venv(t, "mlx_lm.generate"), "--model", dir, "--prompt-cache-file", ours, "--prompt", "more",
		"--max-tokens", "8", "--verbose", "False").Output()
	require.NoError(t, err, "%s", got)
	// mlx-lm's text shows special tokens, archrun's skips them.
	theirText := strings.NewReplacer("<|im_start|>", "", "<|im_end|>", "", "<|endoftext|>", "", "<s>", "", "<pad>", "").Replace(string(got))
	assert.Equal(t, strings.TrimSpace(want), strings.TrimSpace(theirText), "mlx_lm.generate on archrun's cache")

	other := tiny(t, nil)
	err = run([]string{"generate", "-m", other, "-prompt-cache-file", theirs, "-p", "x"}, nil, nil)
	assert.EqualError(t, err, "-prompt-cache-file "+theirs+" was made with the model "+dir+", not "+other+": pass that model, or none")
}

// TestPromptAndChatErrors: the prompt's sources, and chat on a tokenizer
// without a chat template.
func TestPromptAndChatErrors(t *testing.T) {
	dir := tiny(t, nil)
	missing := filepath.Join(t.TempDir(), "absent.txt")
	var u usageError
	err := run([]string{"generate", "-m", dir, "-p", "x", "-f", missing}, nil, nil)
	assert.ErrorAs(t, err, &u)
	assert.EqualError(t, err, "-prompt and -f exclude each other")
	err = run([]string{"generate", "-m", dir, "-f", missing}, nil, nil)
	assert.ErrorAs(t, err, &u)
	assert.EqualError(t, err, "-f: open "+missing+": no such file or directory")

	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cfg))
	delete(cfg, "chat_template")
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644))
	err = runIO([]string{"chat", "-m", dir}, strings.NewReader("hi\n"), nil, nil)
	assert.EqualError(t, err, dir+": the tokenizer has no chat template, which archrun chat needs (archrun generate -ignore-chat-template runs plain prompts)")
	err = run([]string{"generate", "-m", dir, "-p", "hi", "-chat"}, nil, nil)
	assert.EqualError(t, err, "-chat: the tokenizer has no chat template")
}

// TestChatTemplateConfig: -chat-template-config's variables reach the
// template (here one that writes an empty think block when enable_thinking
// is false: 15 more prompt tokens, one per byte).
func TestChatTemplateConfig(t *testing.T) {
	dir := tiny(t, nil)
	p := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]any
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &cfg))
	cfg["chat_template"] = tinychat.Template + "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}"
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
	prompt := func(extra ...string) int { return promptTokens(t, dir, extra...) }
	plain := prompt()
	assert.Equal(t, plain+15, prompt("-chat-template-config", `{"enable_thinking": false}`))
	assert.Equal(t, plain, prompt("-chat-template-config", `{"enable_thinking": true}`))
}

// TestNoProgressOffTerminal: the progress line is for terminals; a prompt
// of many chunks writes none to a pipe or file (the pseudo-terminal tests
// above see it).
func TestNoProgressOffTerminal(t *testing.T) {
	dir := tiny(t, nil)
	var stderr bytes.Buffer
	require.NoError(t, run([]string{"generate", "-m", dir, "-p", strings.Repeat("abcd", 20), "-n", "1", "-prefill-step-size", "4"}, nil, &stderr))
	assert.NotContains(t, stderr.String(), "prompt: ")
	// 80 bytes, the template's 16 and its 4 special tokens.
	assert.Contains(t, stderr.String(), "Prompt: 100 tokens")
}

// TestChatInterruptOnTerminal drives archrun chat on a pseudo-terminal:
// Ctrl-C during an answer stops it and returns to the prompt, where the
// conversation goes on; /quit then ends the REPL with status 0.
func TestChatInterruptOnTerminal(t *testing.T) {
	bin, err := buildArchrun()
	require.NoError(t, err)
	ptmx, tty := openPTY(t)
	cmd := exec.Command(bin, "chat", "-m", smolLM2, "-n", "400")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	require.NoError(t, cmd.Start())
	var term bytes.Buffer
	var mu sync.Mutex
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			term.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// waitFor waits until the terminal shows re n times.
	waitFor := func(re string, n int) {
		t.Helper()
		r := regexp.MustCompile(re)
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := len(r.FindAllIndex(term.Bytes(), -1))
			mu.Unlock()
			if got >= n {
				return
			}
		}
		cmd.Process.Kill()
		t.Fatalf("the terminal never showed %q %d times:\n%s", re, n, term.String())
	}
	waitFor(`>> `, 1)
	_, err = ptmx.Write([]byte("Write a long story about a dragon.\n"))
	require.NoError(t, err)
	waitFor(`[Dd]ragon`, 2) // the question's echo, then the answer
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	waitFor(`\[interrupted\]`, 1)
	waitFor(`>> `, 2)
	_, err = ptmx.Write([]byte("What is the capital of France?\n"))
	require.NoError(t, err)
	waitFor(`\[prompt: \d+ tokens processed, \d+ cached`, 2)
	_, err = ptmx.Write([]byte("/quit\n"))
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	mu.Lock()
	out := term.String()
	mu.Unlock()
	m := regexp.MustCompile(`\[prompt: \d+ tokens processed, (\d+) cached.*generation: (\d+) tokens.*\| (\w+)\]`).FindAllStringSubmatch(out, -1)
	require.Len(t, m, 2, out)
	assert.Equal(t, "cancelled", m[0][3], "the first answer was interrupted")
	gen, _ := strconv.Atoi(m[0][2])
	assert.Less(t, gen, 400)
	cached, _ := strconv.Atoi(m[1][1])
	assert.Greater(t, cached, 0, "the second turn reuses the interrupted first")
}

// TestChatTemplateFlag: -chat-template's file replaces the model's chat
// template (the prompt grows by the text the file adds); a file that
// cannot be read is an error naming the flag.
func TestChatTemplateFlag(t *testing.T) {
	dir := tiny(t, nil)
	prompt := func(extra ...string) int { return promptTokens(t, dir, extra...) }
	plain := prompt()
	file := filepath.Join(t.TempDir(), "template.jinja")
	require.NoError(t, os.WriteFile(file, []byte("PREFIX "+tinychat.Template), 0o644))
	assert.Equal(t, plain+len("PREFIX "), prompt("-chat-template", file))
	missing := filepath.Join(t.TempDir(), "none.jinja")
	err := run([]string{"generate", "-m", dir, "-p", "hi", "-n", "1", "-chat-template", missing}, nil, &bytes.Buffer{})
	require.Error(t, err)
	assert.Equal(t, "-chat-template: open "+missing+": no such file or directory", err.Error())
}

// promptTokens is the prompt's length archrun generate reports for "hi" on
// the model in dir, with the extra flags.
func promptTokens(t *testing.T, dir string, extra ...string) int {
	t.Helper()
	var stderr bytes.Buffer
	require.NoError(t, run(append([]string{"generate", "-m", dir, "-p", "hi", "-n", "1"}, extra...), nil, &stderr))
	m := regexp.MustCompile(`Prompt: (\d+) tokens`).FindStringSubmatch(stderr.String())
	require.NotNil(t, m, stderr.String())
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestGenerateConstrained: -json-schema and -grammar hold archrun
// generate's reply to a schema or a GBNF grammar; both at once is a usage
// error, and a schema or grammar that does not compile an error naming the
// flag and the file.
func TestGenerateConstrained(t *testing.T) {
	dir := tiny(t, nil)
	files := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(files, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	schema := write("schema.json", `{"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"], "additionalProperties": false}`)
	grammar := write("yes.gbnf", `root ::= "yes" | "no"`)
	gen := func(extra ...string) (string, error) {
		var stdout bytes.Buffer
		err := run(append([]string{"generate", "-m", dir, "-p", "hi", "-n", "40", "-verbose=false"}, extra...), &stdout, &bytes.Buffer{})
		return stdout.String(), err
	}
	out, err := gen("-json-schema", schema)
	require.NoError(t, err)
	var v struct{ A *int }
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%q", out)
	require.NotNil(t, v.A, "%q", out)
	assert.True(t, *v.A >= 0 && *v.A <= 9, "%q", out)
	out, err = gen("-grammar", grammar, "-temp", "1", "-seed", "4")
	require.NoError(t, err)
	assert.Contains(t, []string{"yes", "no"}, strings.TrimSpace(out))

	_, err = gen("-json-schema", schema, "-grammar", grammar)
	var u usageError
	require.ErrorAs(t, err, &u)
	assert.Equal(t, "-json-schema and -grammar exclude each other", err.Error())
	bad := write("bad.json", `{"type": "wat"}`)
	_, err = gen("-json-schema", bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-json-schema "+bad+": constrain: JSON schema: Invalid type: wat")
	_, err = gen("-grammar", write("bad.gbnf", "root ::= (("))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-grammar ")
	assert.Contains(t, err.Error(), "GBNF grammar: line 1")
}
