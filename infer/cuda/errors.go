package cuda

import (
	"errors"
	"fmt"
)

// Sentinel errors for the reasons CUDA cannot be used; test them with errors.Is.
var (
	// ErrNoLibrary means the CUDA driver library (libcuda.so.1) could not be loaded.
	ErrNoLibrary = errors.New("CUDA driver library not found")
	// ErrNoDevice means the driver loaded but reports no usable CUDA device.
	ErrNoDevice = errors.New("no CUDA device")
	// ErrUnsupported means this build or platform cannot use CUDA at all.
	ErrUnsupported = errors.New("CUDA is not supported on this platform")
)

// result is a CUresult, the status code every CUDA driver API call returns.
type result uint32

// CUresult codes this package refers to (cuda.h: enum cudaError_enum).
const (
	cudaSuccess            result = 0
	cudaErrInvalidValue    result = 1
	cudaErrOutOfMemory     result = 2
	cudaErrNotInitialized  result = 3
	cudaErrStubLibrary     result = 34
	cudaErrNoDevice        result = 100
	cudaErrInvalidDevice   result = 101
	cudaErrInvalidImage    result = 200
	cudaErrNotFound        result = 500
	cudaErrLaunchFailed    result = 719
	cudaErrNoBinaryForGPU  result = 209
	cudaErrInvalidPTX      result = 218
	cudaErrUnsupportedPTX  result = 222
	cudaErrIllegalAddress  result = 700
	cudaErrLaunchResources result = 701
)

// resultNames names common codes, so that messages stay readable when the driver's own
// cuGetErrorName is unavailable.
var resultNames = map[result]string{
	cudaSuccess:            "CUDA_SUCCESS",
	cudaErrInvalidValue:    "CUDA_ERROR_INVALID_VALUE",
	cudaErrOutOfMemory:     "CUDA_ERROR_OUT_OF_MEMORY",
	cudaErrNotInitialized:  "CUDA_ERROR_NOT_INITIALIZED",
	cudaErrStubLibrary:     "CUDA_ERROR_STUB_LIBRARY",
	cudaErrNoDevice:        "CUDA_ERROR_NO_DEVICE",
	cudaErrInvalidDevice:   "CUDA_ERROR_INVALID_DEVICE",
	cudaErrInvalidImage:    "CUDA_ERROR_INVALID_IMAGE",
	cudaErrNoBinaryForGPU:  "CUDA_ERROR_NO_BINARY_FOR_GPU",
	cudaErrInvalidPTX:      "CUDA_ERROR_INVALID_PTX",
	cudaErrUnsupportedPTX:  "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	cudaErrNotFound:        "CUDA_ERROR_NOT_FOUND",
	cudaErrIllegalAddress:  "CUDA_ERROR_ILLEGAL_ADDRESS",
	cudaErrLaunchResources: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	cudaErrLaunchFailed:    "CUDA_ERROR_LAUNCH_FAILED",
}

// Error is a failed CUDA driver call.
type Error struct {
	Op   string // the driver function, e.g. "cuMemAlloc_v2"
	Code uint32 // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // the driver's description, if it gave one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code)
	if e.Msg != "" && e.Msg != e.Name {
		s += ": " + e.Msg
	}
	return s
}

// Is lets errors.Is(err, ErrNoDevice) match a CUDA_ERROR_NO_DEVICE result.
func (e *Error) Is(target error) bool {
	return target == ErrNoDevice && result(e.Code) == cudaErrNoDevice
}

// newError builds an Error; name and msg may be empty (the code table fills the name).
func newError(op string, r result, name, msg string) *Error {
	if name == "" {
		name = resultNames[r]
		if name == "" {
			name = "CUDA_ERROR_UNKNOWN_CODE"
		}
	}
	return &Error{Op: op, Code: uint32(r), Name: name, Msg: msg}
}
