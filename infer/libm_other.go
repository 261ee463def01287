//go:build !(linux && (amd64 || arm64))

package infer

// useSystemLibm keeps Go's correctly rounded functions on this platform.
func useSystemLibm() {}
