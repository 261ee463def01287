//go:build linux && (amd64 || arm64)

package infer

import (
	"math"
	"sync"

	"github.com/ebitengine/purego"
)

var hybridLibmOnce sync.Once

// useHybridLibm points expf32 and logf32 at the C library's expf and logf, the functions
// llama.cpp's scalar CPU ops (sigmoid, softplus, the delta-rule decay, the SiLU tail) call,
// whenever useSystemLibm chose the C library for RoPE (so TQ_LIBM=go keeps every function
// correctly rounded). The C functions are checked against Go's at load (within one ulp on a
// few arguments) before they are used.
func useHybridLibm() {
	hybridLibmOnce.Do(func() {
		useSystemLibm()
		if libmName == "go" {
			return
		}
		h, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			return
		}
		var e, l func(float32) float32
		for _, f := range []struct {
			fn   *func(float32) float32
			name string
		}{{&e, "expf"}, {&l, "logf"}} {
			if _, err := purego.Dlsym(h, f.name); err != nil {
				return
			}
			purego.RegisterLibFunc(f.fn, h, f.name)
		}
		for _, x := range []float32{-20.5, -1, 0.25, 3, 17.75} {
			if !withinUlp(e(x), float32(math.Exp(float64(x)))) {
				return
			}
			if x > 0 && !withinUlp(l(x), float32(math.Log(float64(x)))) {
				return
			}
		}
		cExpf, cLogf = e, l
	})
}
