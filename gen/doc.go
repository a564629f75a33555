// Package gen is archgen's generator: it compiles the architecture
// descriptors of descriptors/ (the language is in descriptors/README.md)
// into Go packages under generated/.
//
// The pipeline has a pure core:
//
//	Load / Resolve   YAML -> Descriptor (strict, every value with its file and line)
//	                 -> fragments included, extends flattened, defaults applied
//	                 -> Arch, the resolved model: expressions checked and spelled in Go,
//	                    derivations ordered, every structural choice made
//	                    (or a Wrapper, which runs another Arch)
//	Generate         Arch -> files in memory (jennifer emitters; logic stays on Arch)
//	Write / Stale    the two consumers: write generated/, or diff against it
//
// The resolved network is organised by kind, one file per component, each
// owning its fields of the generated types, its lines in build and its
// forward code (component.go): embed.go, block.go (the layer's norm
// slots), norm.go, attention.go (with the sliding window), rope.go,
// mlp.go with one file per MLP kind (mlp_*.go, each registering itself),
// head.go, and scalars.go, the table of optional scalars. shard.go gathers
// the tensor-parallel plan the attention and MLP components tag. A new MLP kind
// is a new file; a new block, norm or rope kind is a row of its file's
// table. model.go builds the components from a descriptor; the emit_*.go
// files only put their pieces in order.
//
// Errors are *Error values that name the file, the line and the key path.
// Explain and Listing are what archgen explain and archgen list print.
package gen
