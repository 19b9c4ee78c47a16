module github.com/cvsm/cvsm/clients/go

go 1.24.0

require golang.org/x/net v0.43.0

require golang.org/x/text v0.28.0 // indirect
