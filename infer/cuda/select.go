package cuda

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvLibrary names the environment variable that overrides the driver library path (default
// DefaultLibrary). Tests point it at a missing file or a fake library.
const EnvLibrary = "TQ_CUDA_LIB"

// DefaultLibrary is the CUDA driver library loaded by default (found through the dynamic loader's
// search path, as the NVIDIA driver installs it).
const DefaultLibrary = "libcuda.so.1"

// Options configures Open and SelectWith.
type Options struct {
	// Library is the driver library path; empty means $TQ_CUDA_LIB, else DefaultLibrary.
	Library string
	// Device is the ordinal of the device to use.
	Device int
}

func (o Options) library() string {
	if o.Library != "" {
		return o.Library
	}
	if v := os.Getenv(EnvLibrary); v != "" {
		return v
	}
	return DefaultLibrary
}

// Available reports whether this build can use CUDA at all (linux on amd64 or arm64); elsewhere
// Select falls back to the CPU.
func Available() bool { return platformSupported }

// Open loads the driver, initialises it and opens one device with the tq kernels loaded.
func Open(o Options) (*Device, error) {
	drv, err := loadDriver(o.library())
	if err != nil {
		return nil, err
	}
	return openDevice(drv, o.Device)
}

// Select chooses the compute backend by name: "auto", "cpu" or "cuda" (an empty name means
// "auto"). It returns the CUDA device, or nil for the CPU, and one line saying what was chosen and
// why, suitable for printing as is.
//
//   - "cpu" never touches the driver.
//   - "auto" uses CUDA when the driver loads and reports a usable device; otherwise it returns nil,
//     a line such as "backend: cpu (cuda unavailable: no CUDA device: CUDA_ERROR_NO_DEVICE)" and no
//     error.
//   - "cuda" returns an error explaining why CUDA cannot be used.
func Select(backend string) (*Device, string, error) { return SelectWith(backend, Options{}) }

// SelectWith is Select with explicit options.
func SelectWith(backend string, o Options) (*Device, string, error) {
	switch strings.ToLower(strings.TrimSpace(backend)) {
	case "cpu":
		return nil, "backend: cpu (requested)", nil
	case "", "auto":
		d, err := Open(o)
		if err != nil {
			return nil, "backend: cpu (cuda unavailable: " + reason(err, o) + ")", nil
		}
		return d, "backend: cuda " + d.Info().String(), nil
	case "cuda":
		d, err := Open(o)
		if err != nil {
			return nil, "", fmt.Errorf("backend cuda unavailable: %w", err)
		}
		return d, "backend: cuda " + d.Info().String(), nil
	}
	return nil, "", fmt.Errorf("unknown backend %q (want auto, cpu or cuda)", backend)
}

// reason condenses an Open failure into a short phrase.
func reason(err error, o Options) string {
	var ce *Error
	switch {
	case errors.Is(err, ErrUnsupported):
		return "not supported by this build or platform"
	case errors.Is(err, ErrNoLibrary):
		return o.library() + " could not be loaded (no NVIDIA driver installed?)"
	case errors.As(err, &ce) && ce.Code == uint32(cudaErrNoDevice):
		return "no CUDA device: CUDA_ERROR_NO_DEVICE"
	case errors.Is(err, ErrNoDevice):
		return "no CUDA device"
	}
	return oneLine(err.Error())
}

// oneLine keeps the first line of s.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
