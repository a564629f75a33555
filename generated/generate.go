// Package generated holds the Go packages archgen makes from descriptors/:
// one per architecture, and registry, which maps model_types to them.
// Every file below carries archgen's header and is rewritten by
//
//	go generate ./...
//
// or go run ./cmd/archgen; none is edited by hand. This file is the one
// that is not generated.
package generated

//go:generate go run ../cmd/archgen -root ..
