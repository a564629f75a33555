// Command mlxinfo prints what the installed libmlx offers and runs one small
// computation on it: the quickest check that the runtime works.
package main

import (
	"fmt"
	"os"

	"github.com/archgen/archgen/runtime/mlx"
)

func main() {
	fmt.Printf("libmlx %s: %d cpu device(s), %d gpu device(s)\n",
		mlx.Version(), mlx.DeviceCount(mlx.CPU), mlx.DeviceCount(mlx.GPU))
	g := mlx.NewGraph(mlx.DefaultStream())
	defer g.Close()
	x := mlx.FromSlice(g, []float32{1, 2, 3, 4}, 2, 2)
	y := g.Softmax(g.Matmul(x, x), false, -1)
	if err := g.Eval(y); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	v, err := y.Float32s()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("softmax([[1 2] [3 4]] @ itself) = %v\n", v)
}
