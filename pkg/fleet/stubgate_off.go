//go:build !fleetstub

package fleet

// StubFromEnv is nil in every shipped binary: the stub turn exists only in
// a binary built with -tags fleetstub (fleetstub_on.go), so no config key
// or environment variable can make an installed host answer guests with it.
func StubFromEnv() Executor { return nil }
