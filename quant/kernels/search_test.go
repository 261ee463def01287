package kernels

import (
	"testing"
	"unsafe"
)

// TestLaneStateLayout pins the field offsets search_amd64.s uses.
func TestLaneStateLayout(t *testing.T) {
	var k QkxLanes
	var q QxLanes
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"QkxLanes.W", unsafe.Offsetof(k.W), 1024},
		{"QkxLanes.fl", unsafe.Offsetof(k.fl), 2048},
		{"QkxLanes.sumW", unsafe.Offsetof(k.sumW), 3072},
		{"QkxLanes.sumX", unsafe.Offsetof(k.sumX), 3104},
		{"QkxLanes.best", unsafe.Offsetof(k.best), 3136},
		{"QkxLanes.scale", unsafe.Offsetof(k.scale), 3168},
		{"QkxLanes.bIs", unsafe.Offsetof(k.bIs), 3200},
		{"QkxLanes.bMin", unsafe.Offsetof(k.bMin), 3232},
		{"QkxLanes.max", unsafe.Offsetof(k.max), 3264},
		{"QkxLanes.min0", unsafe.Offsetof(k.min0), 3296},
		{"QkxLanes.deg", unsafe.Offsetof(k.deg), 3328},
		{"QkxLanes.Scale", unsafe.Offsetof(k.Scale), 3360},
		{"QkxLanes.Min", unsafe.Offsetof(k.Min), 3392},
		{"QkxLanes.L", unsafe.Offsetof(k.L), 3424},
		{"QxLanes.W", unsafe.Offsetof(q.W), 1024},
		{"QxLanes.max", unsafe.Offsetof(q.max), 2048},
		{"QxLanes.bIs", unsafe.Offsetof(q.bIs), 2080},
		{"QxLanes.best", unsafe.Offsetof(q.best), 2112},
		{"QxLanes.deg", unsafe.Offsetof(q.deg), 2144},
		{"QxLanes.Scale", unsafe.Offsetof(q.Scale), 2176},
		{"QxLanes.L", unsafe.Offsetof(q.L), 2208},
	} {
		if c.got != c.want {
			t.Errorf("%s at offset %d, search_amd64.s expects %d", c.name, c.got, c.want)
		}
	}
}

// TestProxyLanesLayout: the offsets search_amd64.s uses for ProxyLanes.
func TestProxyLanesLayout(t *testing.T) {
	var p ProxyLanes
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fd", unsafe.Offsetof(p.Fd), 0}, {"Fm", unsafe.Offsetof(p.Fm), 128}, {"Sqq", unsafe.Offsetof(p.Sqq), 256},
		{"Sq", unsafe.Offsetof(p.Sq), 384}, {"Sw", unsafe.Offsetof(p.Sw), 512}, {"Fixed0", unsafe.Offsetof(p.Fixed0), 640},
		{"Fixed1", unsafe.Offsetof(p.Fixed1), 768}, {"Cost", unsafe.Offsetof(p.Cost), 896},
	} {
		if c.got != c.want {
			t.Errorf("ProxyLanes.%s at %d, the assembly uses %d", c.name, c.got, c.want)
		}
	}
}
