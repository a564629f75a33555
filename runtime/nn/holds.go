package nn

// Holds reports whether the checkpoint has the tensor prefix+name (before
// anything asks for it): how an architecture whose head is tied exactly
// when the checkpoint has no head of its own decides. A listing
// (RecordWeights) holds every tensor, so it lists the untied head.
func (w *Weights) Holds(name string) bool {
	if w.l.record {
		return true
	}
	_, ok := w.l.tensors[w.prefix+name]
	return ok
}
