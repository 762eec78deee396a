module github.com/herdguard/herdguard/bench

go 1.26.0

replace github.com/herdguard/herdguard => ..

require (
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/herdguard/herdguard v0.0.0-00010101000000-000000000000
	github.com/sony/gobreaker/v2 v2.4.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240903143218-8af14fe29dc1 // indirect
)
