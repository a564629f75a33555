module github.com/archgen/archgen

go 1.26
