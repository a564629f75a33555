package gen

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConfigSources: every config in testdata/configs has a row in its
// README.md that says where it came from (published, with its source, or
// hand-written), and every row names a config that is there.
func TestConfigSources(t *testing.T) {
	dir := filepath.Join("testdata", "configs")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (.*) \\|$")
	rows := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = m[2]
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".mlxlm.json") {
			continue
		}
		n++
		name := filepath.ToSlash(strings.TrimPrefix(f, dir+string(filepath.Separator)))
		src, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("%s: no row in %s/README.md", name, dir)
		case strings.HasPrefix(src, "published: "):
			if !regexp.MustCompile(`commit [0-9a-f]{40}|@\d`).MatchString(src) {
				t.Errorf("%s: a published config names no commit or package version: %s", name, src)
			}
		case !strings.HasPrefix(src, "hand-written: "):
			t.Errorf("%s: the source must start with \"published: \" or \"hand-written: \": %s", name, src)
		}
		delete(rows, name)
	}
	if n == 0 {
		t.Fatalf("no configs in %s", dir)
	}
	for name := range rows {
		t.Errorf("%s/README.md lists %s, which is not there", dir, name)
	}
}
