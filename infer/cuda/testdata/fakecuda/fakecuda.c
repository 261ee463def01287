/* fakecuda.c: a stand-in libcuda.so.1 for the fallback tests (no device needed).
 *
 * Built by the Go tests with: cc -shared -fPIC [-DFAKE_INIT_OK] fakecuda.c -o libcuda.so.1
 * Default: cuInit reports CUDA_ERROR_NO_DEVICE (100), as the real driver does on a machine with
 * the driver installed but no GPU. With FAKE_INIT_OK, cuInit succeeds but the library exports only
 * the initialisation functions, as an old or broken driver would.
 */
typedef int CUresult;

CUresult cuInit(unsigned flags) {
    (void)flags;
#ifdef FAKE_INIT_OK
    return 0;
#else
    return 100;
#endif
}

CUresult cuDriverGetVersion(int* v) {
    *v = 12080;
    return 0;
}

CUresult cuDeviceGetCount(int* n) {
#ifdef FAKE_INIT_OK
    *n = 1;
    return 0;
#else
    *n = 0;
    return 3; /* CUDA_ERROR_NOT_INITIALIZED */
#endif
}

CUresult cuGetErrorName(CUresult e, const char** s) {
    switch (e) {
    case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case 100: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    }
    return 1;
}

CUresult cuGetErrorString(CUresult e, const char** s) {
    switch (e) {
    case 3: *s = "initialization error"; return 0;
    case 100: *s = "no CUDA-capable device is detected"; return 0;
    }
    return 1;
}
