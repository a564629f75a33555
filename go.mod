module github.com/archgen/archgen

go 1.26

require (
	github.com/dave/jennifer v1.7.1
	github.com/pmezard/go-difflib v1.0.0
	gopkg.in/yaml.v3 v3.0.1
)
