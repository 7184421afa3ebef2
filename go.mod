module github.com/kvfence/kvfence

go 1.26.8

require (
	github.com/evanphx/json-patch/v5 v5.9.11
	github.com/fxamacker/cbor/v2 v2.10.0
	github.com/google/renameio/v2 v2.0.2
	go.etcd.io/bbolt v1.5.0
	golang.org/x/crypto v0.59.0
)

require (
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
