// Package bench holds herdguard's side-by-side benchmarks against other
// libraries (sony/gobreaker, failsafe-go), in a module of its own so that
// the library's module does not require them:
//
//	go test -run '^$' -bench BenchmarkHealthyPath -benchmem -count=3 ./bench/
//
// It has no code of its own; its benchmarks are in its _test.go files.
package bench
