package gen

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// emitConfig writes config.go:
//
//	type Config struct { HiddenSize int `json:"hidden_size"`; ... }
//	var IgnoredKeys = []string{...}
//	func ParseConfig(data []byte) (*Config, error) {
//		r, err := nn.NewConfigReader(data)
//		c := &Config{ModelType: r.ModelType()}
//		c.HiddenSize = nn.Required[int](r, "hidden_size")   // one per key
//		... minimums, derivations in order, lengths, checks, rope_scaling
//		return c, nil
//	}
func emitConfig(a *Arch) ([]byte, error) {
	f := newFile(a.Pkg(), a.File)
	f.PackageComment(packageDoc(a))

	var fields []jen.Code
	fields = append(fields, jen.Comment("ModelType is model_type."), jen.Id("ModelType").String().Tag(map[string]string{"json": "model_type"}))
	for _, k := range a.Keys {
		fields = append(fields, jen.Line(), jen.Comment(comment(keyDoc(k))),
			jen.Id(k.Field).Add(k.Type.goType()).Tag(map[string]string{"json": k.Name}))
	}
	for _, d := range a.Derived {
		doc := fmt.Sprintf("%s is %s, computed from the config (not a config.json key).", d.Field, d.Expr.Text)
		if d.Doc != "" {
			doc += " " + d.Doc
		}
		fields = append(fields, jen.Line(), jen.Comment(comment(doc)),
			jen.Id(d.Field).Add(d.Type.goType()).Tag(map[string]string{"json": "-"}))
	}
	f.Comment(comment(fmt.Sprintf("Config is a %s config.json as mlx-lm reads it: every key the architecture uses, with mlx-lm's defaults applied.", a.Name)))
	f.Type().Id("Config").Struct(fields...)
	f.Line()

	f.Comment(comment("IgnoredKeys are config.json keys of published checkpoints that this architecture deliberately does not read."))
	var ign []jen.Code
	for _, k := range a.Ignored {
		ign = append(ign, jen.Lit(k))
	}
	f.Var().Id("IgnoredKeys").Op("=").Index().String().Values(ign...)
	f.Line()

	f.Comment(comment("ParseConfig reads a config.json, applying defaults as mlx-lm's ModelArgs does, and reports every missing or bad key by name."))
	f.Func().Id("ParseConfig").Params(jen.Id("data").Index().Byte()).Params(jen.Op("*").Id("Config"), jen.Error()).Block(parseBody(a)...)
	return render(f)
}

// keyDoc says what a key is and where its value comes from.
func keyDoc(k *Key) string {
	var s string
	switch k.Mode {
	case "required":
		s = fmt.Sprintf("%s is %s (required).", k.Field, k.Name)
	case "default":
		s = fmt.Sprintf("%s is %s; %s when absent.", k.Field, k.Name, fmtLiteral(k.Default))
		if k.Null != nil {
			s += fmt.Sprintf(" %s when null.", fmtLiteral(k.Null))
		}
	case "derive":
		s = fmt.Sprintf("%s is %s; %s when absent.", k.Field, k.Name, k.Derive.Text)
	case "optional":
		s = fmt.Sprintf("%s is %s; %s when absent.", k.Field, k.Name, zeroDoc(k.Type))
	}
	if len(k.Fallback) > 0 {
		s += fmt.Sprintf(" Read from %s when %s is absent.", strings.Join(k.Fallback, " or "), k.Name)
	}
	if len(k.Prefer) > 0 {
		s += fmt.Sprintf(" Read from %s first, where present.", strings.Join(k.Prefer, " or "))
	}
	if k.Doc != "" {
		s += " " + k.Doc
	}
	return s
}

// zeroDoc says what an absent optional key reads as.
func zeroDoc(t Type) string {
	switch t {
	case TInt, TFloat:
		return "0"
	case TBool:
		return "false"
	case TString:
		return `""`
	case TRope:
		return "nil (no scaling)"
	}
	return "empty"
}

func fmtLiteral(v any) string {
	switch x := v.(type) {
	case float64:
		return fmtFloat(x)
	case string:
		return fmt.Sprintf("%q", x)
	case ropeDefault:
		return string(x)
	case []any:
		var parts []string
		for _, it := range x {
			parts = append(parts, fmtLiteral(it))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

func returnErr() jen.Code {
	return jen.If(jen.Err().Op(":=").Id("r").Dot("Err").Call(), jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err()))
}

func nnMin(name string, field jen.Code, min float64, t Type) jen.Code {
	var least jen.Code = jen.Lit(int(min))
	if t == TFloat {
		least = jen.Lit(min)
	}
	return jen.Qual(nnPkg, "Min").Call(jen.Id("r"), jen.Lit(name), field, least)
}

func parseBody(a *Arch) []jen.Code {
	c := func(field string) *jen.Statement { return jen.Id("c").Dot(field) }
	body := []jen.Code{
		jen.List(jen.Id("r"), jen.Err()).Op(":=").Qual(nnPkg, "NewConfigReader").Call(jen.Id("data")),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Id("c").Op(":=").Op("&").Id("Config").Values(jen.Dict{jen.Id("ModelType"): jen.Id("r").Dot("ModelType").Call()}),
	}
	// Read every key.
	var has []jen.Code
	for _, k := range a.Keys {
		if k.Mode == "derive" || k.Mode == "optional" && k.Min != nil {
			has = append(has, jen.Id("has"+k.Field))
		}
	}
	if len(has) > 0 {
		body = append(body, jen.Var().List(has...).Bool())
	}
	for _, k := range a.Keys {
		if k.Auto {
			body = append(body, jen.Id("r").Dot("AutoAbsent").Call(jen.Lit(k.Name)))
		}
		args := []jen.Code{jen.Id("r"), jen.Lit(k.Name)}
		var fallbacks []jen.Code
		for _, fb := range k.Fallback {
			fallbacks = append(fallbacks, jen.Lit(fb))
		}
		tp := k.Type.goType()
		switch k.Mode {
		case "required":
			body = append(body, c(k.Field).Op("=").Qual(nnPkg, "Required").Types(tp).Call(append(args, fallbacks...)...))
		case "default":
			if k.Null != nil {
				body = append(body, c(k.Field).Op("=").Qual(nnPkg, "DefaultOrNull").Types(tp).Call(append(append(args, lit(k.Default, k.Type), lit(k.Null, k.Type)), fallbacks...)...))
				break
			}
			if rd, ok := k.Default.(ropeDefault); ok {
				body = append(body, c(k.Field).Op("=").Qual(nnPkg, "DefaultRopeScaling").Call(append(append(args, jen.Lit(string(rd))), fallbacks...)...))
				break
			}
			body = append(body, c(k.Field).Op("=").Qual(nnPkg, "Default").Types(tp).Call(append(append(args, lit(k.Default, k.Type)), fallbacks...)...))
		case "optional":
			// an absent optional key is its type's zero, which its minimum
			// does not bound: the minimum is checked where the key is present
			has := jen.Id("_")
			if k.Min != nil {
				has = jen.Id("has" + k.Field)
			}
			body = append(body, jen.List(c(k.Field), has).Op("=").Qual(nnPkg, "Optional").Types(tp).Call(append(args, fallbacks...)...))
		case "derive":
			body = append(body, jen.List(c(k.Field), jen.Id("has"+k.Field)).Op("=").Qual(nnPkg, "Optional").Types(tp).Call(append(args, fallbacks...)...))
		}
		if len(k.Prefer) > 0 {
			prefer := []jen.Code{jen.Id("r"), c(k.Field)}
			for _, p := range k.Prefer {
				prefer = append(prefer, jen.Lit(p))
			}
			body = append(body, c(k.Field).Op("=").Qual(nnPkg, "Prefer").Types(tp).Call(prefer...))
		}
	}
	// Minimums of what was read, before anything divides by it.
	var mins []jen.Code
	for _, k := range a.Keys {
		switch {
		case k.Min == nil || k.Mode == "derive":
		case k.Mode == "optional":
			mins = append(mins, jen.If(jen.Id("has"+k.Field)).Block(nnMin(k.Name, c(k.Field), *k.Min, k.Type)))
		default:
			mins = append(mins, nnMin(k.Name, c(k.Field), *k.Min, k.Type))
		}
	}
	// A layer count past what archgen builds, before anything per layer.
	if a.Layers != nil {
		if k := a.KeyByName(strings.TrimSpace(a.Layers.Text)); k != nil && k.Type == TInt && k.Mode != "derive" {
			mins = append(mins, jen.Qual(nnPkg, "LayerCount").Call(jen.Id("r"), jen.Lit(k.Name), c(k.Field)))
		}
	}
	body = append(body, mins...)
	body = append(body, returnErr())
	// Derivations, in dependency order.
	for _, name := range a.Derivations() {
		if k := a.KeyByName(name); k != nil {
			body = append(body, jen.If(jen.Op("!").Id("has"+k.Field)).Block(c(k.Field).Op("=").Add(k.Derive.Code())))
			if k.Min != nil {
				body = append(body, nnMin(k.Name, c(k.Field), *k.Min, k.Type))
			}
			continue
		}
		d := a.DerivedByName(name)
		body = append(body, c(d.Field).Op("=").Add(d.Expr.Code()))
		if d.Min != nil {
			body = append(body, nnMin(d.Name, c(d.Field), *d.Min, d.Type))
		}
	}
	if len(a.Derivations()) > 0 {
		body = append(body, returnErr())
	}
	// Lengths and checks, on a config whose values are all in range.
	for _, k := range a.Keys {
		if k.Length != nil {
			body = append(body, jen.Id("r").Dot("Len").Call(jen.Lit(k.Name), jen.Len(c(k.Field)), k.Length.Code(), jen.Lit(k.Length.Text)))
		}
	}
	for _, ch := range a.Checks {
		body = append(body, jen.Id("r").Dot("Check").Call(ch.Expr.Code(), jen.Lit(ch.Key), jen.Lit(ch.Message)))
	}
	if rs := a.Rope.Scaling; rs != nil {
		var maxPos jen.Code = jen.Lit(0)
		if a.Rope.MaxPositions != nil {
			maxPos = a.Rope.MaxPositions.Code()
		}
		body = append(body,
			jen.Var().Id("ropeErr").Error(),
			jen.List(c(rs.Field), jen.Id("ropeErr")).Op("=").Qual(nnPkg, "CheckRopeScaling").Call(
				a.Rope.KindConst(), c(rs.Field), maxPos),
			jen.Id("r").Dot("Fail").Call(jen.Lit(rs.Name), jen.Id("ropeErr")),
		)
	}
	body = append(body, returnErr(), jen.Return(jen.Id("c"), jen.Nil()))
	return body
}

// packageDoc is the package comment: the descriptor's doc and how the
// package is used.
func packageDoc(a *Arch) string {
	s := fmt.Sprintf("Package %s runs the %s architecture on MLX. %s", a.Pkg(), a.Name, a.Doc)
	if len(a.Aliases) > 0 {
		s += fmt.Sprintf("\n\nCheckpoints whose model_type is %s run on it too.", strings.Join(quoted(a.Aliases), " or "))
	}
	s += fmt.Sprintf("\n\nIts support tier is %s (see descriptors/README.md). Load reads a model directory as mlx-lm saves it; Forward runs tokens to logits over the caches of NewCaches.", a.Tier)
	return comment(s)
}

func quoted(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}
