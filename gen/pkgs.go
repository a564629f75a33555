package gen

const (
	nnPkg  = "github.com/archgen/archgen/runtime/nn"
	mlxPkg = "github.com/archgen/archgen/runtime/mlx"
	kvPkg  = "github.com/archgen/archgen/runtime/kv"
)
