//go:build linux && (amd64 || arm64)

package infer

import (
	"math"
	"os"
	"sync"

	"github.com/ebitengine/purego"
)

var libmOnce sync.Once

// useSystemLibm makes RoPE use the C library's cosf, sinf and logf, and the Qwen3.5 hybrid
// layers' scalar ops its expf and logf (expf32/logf32), the functions llama.cpp calls, so that tq and llama.cpp on the same machine compute the same rotation to the last
// bit (glibc's cosf/sinf are not correctly rounded; the correctly rounded Go values differ
// for about 1.3% of RoPE angles, enough to change a quantized model's greedy continuation
// after a few dozen tokens). Without a loadable libm.so.6, or with TQ_LIBM=go, tq keeps the
// correctly rounded functions. The C functions are checked against Go's at load (within one
// ulp on a few arguments) before they are used.
func useSystemLibm() {
	libmOnce.Do(func() {
		if os.Getenv("TQ_LIBM") == "go" {
			return
		}
		h, err := purego.Dlopen("libm.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			return
		}
		var cosf, sinf, clogf, cexpf func(float32) float32
		for _, f := range []struct {
			fn   *func(float32) float32
			name string
		}{{&cosf, "cosf"}, {&sinf, "sinf"}, {&clogf, "logf"}, {&cexpf, "expf"}} {
			if _, err := purego.Dlsym(h, f.name); err != nil {
				return
			}
			purego.RegisterLibFunc(f.fn, h, f.name)
		}
		for _, x := range []float32{0.5, 3, 1234.5, 1e-3, 17.75} {
			if !withinUlp(cosf(x), float32(math.Cos(float64(x)))) || !withinUlp(sinf(x), float32(math.Sin(float64(x)))) ||
				!withinUlp(clogf(x), float32(math.Log(float64(x)))) || !withinUlp(cexpf(-x), float32(math.Exp(float64(-x)))) {
				return
			}
		}
		ropeCosSin = func(x float32) (float32, float32) { return cosf(x), sinf(x) }
		logf = clogf
		cExpf, cLogf = cexpf, clogf // the hybrid layers' scalar ops (hybrid_math.go)
		libmName = "libm.so.6"
	})
}

func withinUlp(a, b float32) bool {
	return a == b || math.Nextafter32(a, b) == b
}
