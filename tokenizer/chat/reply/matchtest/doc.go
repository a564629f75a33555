// Package matchtest checks the grammars of package reply with
// llguidance, through package constrain: each compiles, takes the calls
// of its format and refuses others. It holds tests only, apart from reply
// so that reply's own tests need no cgo library.
package matchtest
