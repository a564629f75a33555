package gen

import "testing"

// BenchmarkGenerateAll is archgen's whole job: read and resolve every
// descriptor, then emit every generated package and the registry.
func BenchmarkGenerateAll(b *testing.B) {
	for b.Loop() {
		set, err := Load("../descriptors", "descriptors")
		if err != nil {
			b.Fatal(err)
		}
		files, err := Generate(set)
		if err != nil {
			b.Fatal(err)
		}
		if len(files) == 0 {
			b.Fatal("no files generated")
		}
	}
}
