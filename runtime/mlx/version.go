package mlx

// Generated code states the version of this package's API it was generated
// for with
//
//	const _ = mlx.EnforceVersion(N - mlx.MinGenVersion)
//	const _ = mlx.EnforceVersion(mlx.MaxGenVersion - N)
//
// Each line is a constant conversion of a negative number to an unsigned
// type when N lies outside [MinGenVersion, MaxGenVersion], which the
// compiler rejects: generated code and a runtime that disagree fail the
// build instead of misbehaving.
type EnforceVersion uint

const (
	// MinGenVersion is the oldest generated-code version this runtime runs.
	MinGenVersion = 1
	// MaxGenVersion is the newest.
	MaxGenVersion = 1
)
