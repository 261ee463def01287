//go:build !(linux && (amd64 || arm64))

package infer

// useHybridLibm keeps Go's correctly rounded expf32 and logf32 on this platform.
func useHybridLibm() {}
