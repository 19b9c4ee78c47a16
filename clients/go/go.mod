module github.com/cvsm/cvsm/clients/go

go 1.22
