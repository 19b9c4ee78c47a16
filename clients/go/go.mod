module github.com/cvsm/cvsm/clients/go

go 1.24.0

require (
	github.com/zalando/go-keyring v0.2.8
	golang.org/x/net v0.43.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/danieljoos/wincred v1.2.3 // indirect
	github.com/godbus/dbus/v5 v5.2.2 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.28.0 // indirect
)
