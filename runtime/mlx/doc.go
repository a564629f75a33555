// Package mlx is archgen's binding to Apple's MLX: arrays, the ops every
// generated architecture needs, evaluation, safetensors and GGUF files, and
// memory figures. It calls libmlx's C++ API through a thin C ABI of its own
// (shim.h, shim.cpp); no C++ exception, abort or exit crosses into Go.
//
// # Graphs: straight-line code, no lost errors
//
// Ops are methods on a *Graph. A graph binds a stream, owns every array its
// ops make, and keeps the first error:
//
//	g := mlx.NewGraph(mlx.DefaultStream())
//	defer g.Close()
//	h := g.Matmul(x, w)             // no error to check here
//	h = g.Add(h, b)
//	y := g.Softmax(h, false, -1)
//	if err := g.Eval(y); err != nil { // the first failure, with MLX's message
//		return err
//	}
//	out, err := y.Float32s()
//
// The rule: an op never returns an error. When one fails (MLX rejects its
// shapes, an argument was freed, ...), the graph records the failure and
// every later op on that graph returns an invalid array at once. Eval,
// AsyncEval and Err report the recorded error, so it surfaces where the
// graph is evaluated, and none is lost: a graph that failed can not be
// evaluated. Reading an invalid array returns the graph's error too.
//
// # Lifetimes
//
// Arrays are released deterministically. Close frees every array the graph
// made, in one call, except those passed to Keep, which then belong to the
// caller and are released with (*Array).Free. Arrays that do not come from a
// graph (NewArray, the loaders) belong to the caller from the start. MLX
// counts references itself, so freeing a handle whose array is still an input
// of an unevaluated graph is safe: the graph keeps what it needs. Using an
// array after it was freed, or after its graph was closed, is reported as an
// error, never a crash.
//
// # Streams, devices and goroutines
//
// Every graph runs on one stream, chosen by the caller: DefaultStream is a
// process-wide CPU stream; NewStream makes another on any device the
// installed libmlx has (DeviceCount tells; a GPU is never assumed). Since MLX
// 0.32 a stream made the usual way belongs to the OS thread that made it,
// while Go moves goroutines between threads; this package therefore makes
// every stream with MLX's thread-independent kind and serializes evaluation
// per stream with a mutex. Any goroutine may use any stream. A *Graph, like
// a bytes.Buffer, is used by one goroutine at a time; arrays that have been
// evaluated (weights, say) may be read by graphs on many goroutines at once.
//
// # Several processes
//
// InitGroup joins the group of processes MLX's distributed layer finds
// (MLX_RANK and MLX_HOSTFILE, as mlx.launch sets them); AllSum, AllGather,
// AllMax, Send and Recv are graph ops over it. Every evaluation on a stream
// that runs them is timed: a peer that stops answering ends the process
// with an error after the group's timeout instead of a silent wait.
package mlx
