package archgen_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeSection is the README's section on using archgen from another
// module, and its fenced blocks in order.
func readmeSection(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "## Using archgen from another module")
	require.GreaterOrEqual(t, i, 0, "README has no section on other modules")
	s = s[i:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```[a-z]*\n(.*?)```").FindAllStringSubmatch(s, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// TestOtherModule writes the README's go.mod and program into a module of
// their own (the clone's path in place of /path/to/archgen), runs the
// README's commands in it, and checks that the program streams a chat
// answer from the real checkpoint. The module proxy is off: the replace
// directive is what finds archgen, the module cache its dependencies.
func TestOtherModule(t *testing.T) {
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	blocks := readmeSection(t)
	require.Len(t, blocks, 3, "the section shows go.mod, main.go and the commands")
	gomod, program, commands := blocks[0], blocks[1], blocks[2]
	require.True(t, strings.HasPrefix(gomod, "module "), gomod)
	require.Contains(t, gomod, "replace github.com/archgen/archgen => /path/to/archgen")
	lines := strings.Count(strings.TrimSpace(program), "\n") + 1
	assert.LessOrEqual(t, lines, 35, "the program is about 20 lines of code")
	t.Logf("the program is %d lines", lines)

	dir := t.TempDir()
	fill := func(s string) string { return strings.ReplaceAll(s, "/path/to/archgen", root) }
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(fill(gomod)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	// The machine is offline: archgen's go.sum stands for the checksum
	// database, which go mod tidy would otherwise ask about each
	// dependency the module cache holds.
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", fill(commands))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off",
		"CGO_CFLAGS=", "CGO_CXXFLAGS=", "CGO_LDFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "Paris")
}
