// Package gen is archgen's generator: it compiles the architecture
// descriptors of descriptors/ (the language is in descriptors/README.md)
// into Go packages under generated/.
//
// The pipeline has a pure core:
//
//	Load / Resolve   YAML -> Descriptor (strict, every value with its file and line)
//	                 -> extends flattened, defaults applied
//	                 -> Arch, the resolved model: expressions checked and spelled in Go,
//	                    derivations ordered, every structural choice made
//	Generate         Arch -> files in memory (jennifer emitters; logic stays on Arch)
//	Write / Stale    the two consumers: write generated/, or diff against it
//
// Errors are *Error values that name the file, the line and the key path.
// Explain and Listing are what archgen explain and archgen list print.
package gen
