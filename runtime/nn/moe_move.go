package nn

// MoveTensor renames the checkpoint's tensor from to to, when the
// checkpoint holds from: a parameter some checkpoints keep in another
// module than the one that reads it (a router's correction bias beside
// the router). A checkpoint holding both is an error naming them.
func (w *Weights) MoveTensor(from, to string) {
	l := w.l
	if l.record {
		return
	}
	a, ok := l.tensors[w.prefix+from]
	if !ok {
		return
	}
	if _, dup := l.tensors[w.prefix+to]; dup {
		w.failf("both %s and %s: the checkpoint holds one tensor twice", w.local(from), w.local(to))
		return
	}
	delete(l.tensors, w.prefix+from)
	l.tensors[w.prefix+to] = a
}
