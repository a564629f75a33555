package hub

import (
	"regexp"
	"strings"
)

// ModelFiles are the files Download fetches when Options.Allow is empty:
// what archgen loads from a model directory. model*.safetensors keeps
// the shards and leaves out the consolidated copies some repos hold
// beside them (consolidated.safetensors), as mlx-lm's own download does;
// GGUF files are fetched only when a pattern asks for them.
var ModelFiles = []string{
	"config.json",
	"generation_config.json",
	"model*.safetensors",
	"model.safetensors.index.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"chat_template.jinja",
	"chat_template.json",
}

// pattern is a glob as huggingface_hub's allow_patterns and
// ignore_patterns read it (Python's fnmatch, case-sensitive): * and ?
// match any characters, / included, so "*.json" matches
// "sub/config.json"; [abc] and [!abc] are sets; a pattern that ends in /
// matches everything below that folder.
type pattern struct {
	src string
	re  *regexp.Regexp
}

// compilePatterns compiles globs; a glob that no regexp can express does
// not exist: every character has a literal reading.
func compilePatterns(globs []string) []pattern {
	out := make([]pattern, 0, len(globs))
	for _, g := range globs {
		g = strings.ReplaceAll(g, `\`, "/")
		if strings.HasSuffix(g, "/") {
			g += "*"
		}
		out = append(out, pattern{g, regexp.MustCompile(globRegexp(g))})
	}
	return out
}

// globRegexp is the anchored regexp of one glob, read as fnmatch reads it.
func globRegexp(g string) string {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(g) && g[j] == '!' {
				j++
			}
			if j < len(g) && g[j] == ']' {
				j++
			}
			for j < len(g) && g[j] != ']' {
				j++
			}
			if j >= len(g) {
				b.WriteString(`\[`) // an unclosed [ is itself
				continue
			}
			set := g[i+1 : j]
			i = j
			neg := strings.HasPrefix(set, "!")
			if neg {
				set = set[1:]
			}
			b.WriteByte('[')
			if neg {
				b.WriteByte('^')
			}
			for k := 0; k < len(set); k++ {
				switch set[k] {
				case '\\', '[', ']', '^':
					b.WriteByte('\\')
				case '-':
					if k == 0 || k == len(set)-1 {
						b.WriteByte('\\')
					}
				}
				b.WriteByte(set[k])
			}
			b.WriteByte(']')
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString(`$`)
	return b.String()
}

// matchAny says whether name matches one of ps.
func matchAny(ps []pattern, name string) bool {
	for _, p := range ps {
		if p.re.MatchString(name) {
			return true
		}
	}
	return false
}

// selectFiles keeps the names allow matches (ModelFiles when allow is
// empty) and ignore does not, in their order.
func selectFiles(names, allow, ignore []string) []string {
	if len(allow) == 0 {
		allow = ModelFiles
	}
	a, ig := compilePatterns(allow), compilePatterns(ignore)
	var out []string
	for _, n := range names {
		n2 := strings.ReplaceAll(n, `\`, "/")
		if matchAny(a, n2) && !matchAny(ig, n2) {
			out = append(out, n)
		}
	}
	return out
}

// Match says whether a file's path in a repo matches a glob, as
// Options.Allow and Options.Ignore read it.
func Match(glob, name string) bool {
	return matchAny(compilePatterns([]string{glob}), strings.ReplaceAll(name, `\`, "/"))
}
