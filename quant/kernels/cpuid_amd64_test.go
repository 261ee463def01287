//go:build amd64 && !purego

package kernels

import (
	"os"
	"strings"
	"testing"
)

// TestVendor checks the CPUID vendor string against Linux's /proc/cpuinfo (where it can be
// read), and that the VDPBF16PS default follows it: on by default only on AMD's CPUs with
// AVX512-BF16 (dpPays), unless TQ_BF16DP says otherwise.
func TestVendor(t *testing.T) {
	v := vendor()
	if len(v) != 12 || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r > '~' }) {
		t.Fatalf("vendor %q: want 12 printable characters", v)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
				if want := strings.TrimSpace(val); want != v {
					t.Errorf("CPUID vendor %q, /proc/cpuinfo %q", v, want)
				}
				break
			}
		}
	}
	if !dpPays("AuthenticAMD") || dpPays("GenuineIntel") {
		t.Error("dpPays: want AMD only")
	}
	if os.Getenv("TQ_BF16DP") == "" {
		if got, want := dpDefault(), haveDP && v == "AuthenticAMD"; got != want {
			t.Errorf("dpDefault() = %v on %s (AVX512-BF16 %v), want %v", got, v, haveDP, want)
		}
	}
	t.Logf("vendor %s, AVX512-BF16 %v, VDPBF16PS by default %v", v, haveDP, dpDefault())
}
