// Command archgen compiles the architecture descriptors of descriptors/
// into Go packages under generated/: one package per architecture (its
// config parser, typed weights and loader, and a straight-line forward
// pass), and generated/registry, which maps model_types to them.
//
// Usage:
//
//	archgen [-root dir]              generate: rewrite generated/ from descriptors/
//	archgen -check [-root dir]       print a diff of what generating would change
//	archgen [-root dir] list         list the architectures, their tiers and aliases
//	archgen [-root dir] explain TYPE print TYPE's resolved descriptor
//	archgen [-root dir] new TYPE --from config.json [--extends BASE]
//	                                 draft descriptors/TYPE.yaml from a published config
//
// Generating writes nothing unless every descriptor resolves and every file
// is made; it removes the generated files of a descriptor that is gone, and
// leaves files without archgen's header alone. The output is byte-stable:
// generating twice changes nothing. go generate ./... runs it.
//
// -check exits with status 1 when generated/ is stale (printing the unified
// diff that generating would apply) and 0 when it is current; CI runs it.
//
// explain prints every value of the descriptor after extends and defaults,
// one per line, with its origin: a file and line of the descriptor itself,
// "inherited" with the base's file and line, or "default" for the
// language's default (descriptors/README.md lists them).
//
// new drafts descriptors/TYPE.yaml from a published config.json: it
// extends BASE, or the descriptor whose keys fit the config best (it says
// which and why), lists every key of the config as read by the base,
// ignored by it, or a TODO under config.ignore with its value and the
// descriptors that read a key of that name, and the keys the base requires
// that the config lacks. It prints a parity case stub for
// parity/refgen/cases.py: the config at the cases' small sizes. It refuses
// a model_type that already runs, a config of another model_type, and an
// existing file. docs/ADDING_AN_ARCH.md walks through the rest.
//
// -root is the module root, the directory holding descriptors/ and
// generated/; by default the nearest directory above the working one that
// has descriptors/ and go.mod.
//
// Errors name the file, line and key: descriptors/qwen2.yaml:14:
// structure.mlp.kind: unknown "gegl" (want one of ...). They exit with
// status 2.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/archgen/archgen/gen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("archgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "", "module root (default: the nearest directory above with descriptors/ and go.mod)")
	check := fs.Bool("check", false, "print a diff of what generating would change; exit 1 if anything would")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: archgen [-root dir] [-check] [list | explain TYPE | new TYPE --from config.json [--extends BASE]]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	dir := *root
	if dir == "" {
		var err error
		if dir, err = findRoot(); err != nil {
			fmt.Fprintln(stderr, "archgen:", err)
			return 2
		}
	}
	set, err := gen.Load(filepath.Join(dir, "descriptors"), "descriptors")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	rest := fs.Args()
	switch {
	case len(rest) == 1 && rest[0] == "list" && !*check:
		fmt.Fprint(stdout, gen.Listing(set))
		return 0
	case len(rest) == 2 && rest[0] == "explain" && !*check:
		out, err := gen.Explain(set, rest[1])
		if err != nil {
			fmt.Fprintln(stderr, "archgen:", err)
			return 2
		}
		fmt.Fprint(stdout, out)
		return 0
	case len(rest) >= 1 && rest[0] == "new" && !*check:
		return runNew(dir, set, rest[1:], stdout, stderr)
	case len(rest) > 0:
		fs.Usage()
		return 2
	}
	files, err := gen.Generate(set)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *check {
		diff, err := gen.Stale(dir, files)
		if err != nil {
			fmt.Fprintln(stderr, "archgen:", err)
			return 2
		}
		if diff != "" {
			fmt.Fprint(stdout, diff)
			fmt.Fprintln(stderr, "archgen: generated/ is stale; run go generate ./... (or go run ./cmd/archgen)")
			return 1
		}
		return 0
	}
	if err := gen.Write(dir, files); err != nil {
		fmt.Fprintln(stderr, "archgen:", err)
		return 2
	}
	return 0
}

// findRoot is the nearest directory, from the working one up, holding
// descriptors/ and go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isDir(filepath.Join(dir, "descriptors")) && isFile(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no directory above the working one holds descriptors/ and go.mod (use -root)")
		}
		dir = up
	}
}

func isDir(p string) bool  { st, err := os.Stat(p); return err == nil && st.IsDir() }
func isFile(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }
