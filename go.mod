module github.com/archgen/archgen

go 1.26.0

require (
	github.com/dlclark/regexp2 v1.12.0
	golang.org/x/text v0.44.0
)

require github.com/ardanlabs/jinja v1.8.0
