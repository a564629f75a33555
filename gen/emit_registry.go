package gen

import (
	"encoding/json"
	"sort"

	"github.com/dave/jennifer/jen"
)

const registrySrc = "descriptors/*.yaml"

// configsDir holds the published configs and mlx-lm's reading of each,
// relative to generated/registry.
const configsDir = "../../gen/testdata/configs"

// emitRegistry writes generated/registry/registry.go:
//
//	type Model = nn.Model
//	var catalog = nn.NewCatalog([]nn.Arch{gemma.Arch, ...}, remapped, drafters)
//	func Load(dir string, opts nn.Options) (Model, error)
//	func Lookup(modelType string) (*nn.Arch, error)
//	func Archs() []nn.Arch
func emitRegistry(s *Set, module string) ([]byte, error) {
	f := newFile("registry", registrySrc)
	f.PackageComment(comment("Package registry lists every generated architecture by model_type, with its aliases and support tier, refuses the model_types archgen does not run with the reason, and loads any supported model directory without knowing its architecture when compiling."))
	var archs []jen.Code
	for _, a := range s.Archs {
		f.ImportName(module+"/"+a.Dir(), a.Pkg())
		archs = append(archs, jen.Line().Qual(module+"/"+a.Dir(), "Arch"))
	}
	for _, w := range s.Wrappers {
		archs = append(archs, jen.Line().Add(w.archEntry()))
	}
	archs = append(archs, jen.Line())
	remapped := jen.Dict{}
	for _, k := range sortedKeys(s.Remapped) {
		remapped[jen.Lit(k)] = jen.Lit(s.Remapped[k])
	}
	var drafters []jen.Code
	for _, d := range s.Drafters {
		drafters = append(drafters, jen.Lit(d))
	}
	f.Comment("Model is a loaded model of any architecture.")
	f.Type().Id("Model").Op("=").Qual(nnPkg, "Model")
	f.Line()
	f.Comment(comment("catalog holds the architectures, the aliases mlx-lm remaps to architectures without a descriptor (descriptors/registry.yaml), and the speculative-decoding drafters, which never run alone."))
	f.Var().Id("catalog").Op("=").Qual(nnPkg, "NewCatalog").Call(
		jen.Line().Index().Qual(nnPkg, "Arch").Values(archs...),
		jen.Line().Map(jen.String()).String().Values(remapped),
		jen.Line().Index().String().Values(drafters...),
		jen.Line(),
	)
	f.Line()
	f.Comment(comment("Load loads the model in dir (config.json with its model_type, and the safetensors mlx-lm saves) on the architecture its model_type names."))
	f.Func().Id("Load").Params(jen.Id("dir").String(), jen.Id("opts").Qual(nnPkg, "Options")).Params(jen.Id("Model"), jen.Error()).Block(
		jen.Return(jen.Id("catalog").Dot("Load").Call(jen.Id("dir"), jen.Id("opts"))),
	)
	f.Line()
	f.Comment("Lookup is the architecture that runs modelType, or why none does.")
	f.Func().Id("Lookup").Params(jen.Id("modelType").String()).Params(jen.Op("*").Qual(nnPkg, "Arch"), jen.Error()).Block(
		jen.Return(jen.Id("catalog").Dot("Lookup").Call(jen.Id("modelType"))),
	)
	f.Line()
	f.Comment("Archs lists the supported architectures, sorted by name.")
	f.Func().Id("Archs").Params().Index().Qual(nnPkg, "Arch").Block(
		jen.Return(jen.Id("catalog").Dot("Archs").Call()),
	)
	return render(f)
}

// emitRegistryTest writes the registry's tests: every name resolves, every
// refusal names its reason, and each architecture's ParseConfig agrees with
// mlx-lm on the published configs of gen/testdata/configs.
func emitRegistryTest(s *Set) ([]byte, error) {
	f := newFile("registry", registrySrc)
	f.ImportName("github.com/archgen/archgen/runtime/nn/nntest", "nntest")
	names := jen.Dict{}
	for _, a := range s.Archs {
		names[jen.Lit(a.Name)] = jen.Lit(a.Name)
		for _, al := range a.Aliases {
			names[jen.Lit(al)] = jen.Lit(a.Name)
		}
	}
	for _, w := range s.Wrappers {
		names[jen.Lit(w.Name)] = jen.Lit(w.Name)
		for _, al := range w.Aliases {
			names[jen.Lit(al)] = jen.Lit(w.Name)
		}
	}
	remapped := jen.Dict{}
	for _, k := range sortedKeys(s.Remapped) {
		remapped[jen.Lit(k)] = jen.Lit(s.Remapped[k])
	}
	var drafters []jen.Code
	for _, d := range s.Drafters {
		drafters = append(drafters, jen.Lit(d))
	}
	f.Func().Id("TestLookup").Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual("github.com/archgen/archgen/runtime/nn/nntest", "Lookup").Call(jen.Id("t"), jen.Id("Lookup"),
			jen.Line().Map(jen.String()).String().Values(names),
			jen.Line().Map(jen.String()).String().Values(remapped),
			jen.Line().Index().String().Values(drafters...),
			jen.Line(),
		),
	)
	f.Line()
	f.Func().Id("TestConfigReference").Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Qual("github.com/archgen/archgen/runtime/nn/nntest", "ConfigReference").Call(jen.Id("t"), jen.Lit(configsDir), jen.Id("Archs").Call()),
	)
	return render(f)
}

// emitArchTest writes an architecture's tests: forward passes on a tiny
// random checkpoint of its test_config.
func emitArchTest(a *Arch) ([]byte, error) {
	f := newFile(a.Pkg(), a.File)
	nt := "github.com/archgen/archgen/runtime/nn/nntest"
	f.ImportName(nt, "nntest")
	cfg, err := json.MarshalIndent(a.TestConfig, "", "  ")
	if err != nil {
		return nil, err
	}
	f.Comment("testConfig is the descriptor's test_config: a small " + a.Name + ".")
	f.Const().Id("testConfig").Op("=").Add(goString(string(cfg)))
	f.Line()
	tests := []struct{ name, fn, doc string }{
		{"TestForward", "Forward", "runs a batch through a random checkpoint: shapes, dtypes, finite logits"},
		{"TestCachedDecode", "CachedDecode", "checks that a prefill then one token at a time gives the logits of one full pass"},
		{"TestQuantized", "Quantized", "loads and runs the checkpoint quantized as mlx-lm's convert would"},
		{"TestLoadErrors", "LoadErrors", "checks the messages of a missing, misshapen and unexpected tensor"},
		{"TestTensors", "Tensors", "checks that Tensors lists what Load reads, for every layer"},
		{"TestCacheOptions", "CacheOptions", "checks caches made with options: refused ones, bounded ones"},
	}
	if a.Encoder != nil {
		// An encoder keeps no caches and has no logits: its states instead.
		tests = []struct{ name, fn, doc string }{
			{"TestEncode", "Encode", "runs a padded batch through a random checkpoint: shapes, dtypes, finite states, each row its input's alone"},
			tests[2], tests[3], tests[4],
		}
	}
	for _, t := range tests {
		f.Comment(t.name + " " + t.doc + ".")
		f.Func().Id(t.name).Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
			jen.Qual(nt, t.fn).Call(jen.Id("t"), jen.Id("Arch"), jen.Id("testConfig")),
		)
		f.Line()
	}
	return render(f)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
