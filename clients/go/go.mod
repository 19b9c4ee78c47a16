module github.com/cvsm/cvsm/clients/go

go 1.24.0

require (
	golang.org/x/net v0.43.0
	gopkg.in/yaml.v3 v3.0.1
)

require golang.org/x/text v0.28.0 // indirect
