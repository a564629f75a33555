module github.com/archgen/archgen

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/dave/jennifer v1.7.1
	github.com/dlclark/regexp2 v1.12.0
	github.com/pmezard/go-difflib v1.0.0
	golang.org/x/text v0.44.0
	gopkg.in/yaml.v3 v3.0.1
)
