// ops.cu: element-wise and per-row operations of the transformer forward pass, following the CPU
// runner (package infer) operation by operation.
#include "common.cuh"

// RN_BATCH is the elements a thread of tq_rmsnorm loads before it uses any.
#define RN_BATCH 8

// tq_rmsnorm: y[r] = x[r] * (1/sqrt(mean(x[r]²) + eps)) * w for rows r < rows of n floats. w may be
// null (no weight); y may alias x. Launch: grid.x = rows, block = 256.
extern "C" __global__ void tq_rmsnorm(const float* x, const float* w, float* y, int n, int rows, float eps) {
    __shared__ float sh[32];
    const int r = blockIdx.x;
    if (r >= rows) return; // uniform for the block
    const float* xr = x + (u64)r * n;
    float* yr = y + (u64)r * n;
    const int nt = blockDim.x;
    // Elements are loaded RN_BATCH per thread before any is used (y may alias x, so a load after a
    // store would otherwise wait for it); each thread still adds its squares in index order.
    float s = 0.0f;
    for (int i0 = threadIdx.x; i0 < n; i0 += RN_BATCH * nt) {
        float v[RN_BATCH];
#pragma unroll
        for (int m = 0; m < RN_BATCH; ++m) v[m] = i0 + m * nt < n ? xr[i0 + m * nt] : 0.0f;
#pragma unroll
        for (int m = 0; m < RN_BATCH; ++m) s += v[m] * v[m];
    }
    s = block_sum(s, sh);
    const float scale = 1.0f / sqrtf(s / (float)n + eps);
    for (int i0 = threadIdx.x; i0 < n; i0 += RN_BATCH * nt) {
        float v[RN_BATCH], wv[RN_BATCH];
#pragma unroll
        for (int m = 0; m < RN_BATCH; ++m) {
            const int i = i0 + m * nt;
            v[m] = i < n ? xr[i] : 0.0f;
            wv[m] = w && i < n ? w[i] : 1.0f;
        }
#pragma unroll
        for (int m = 0; m < RN_BATCH; ++m) {
            const int i = i0 + m * nt;
            if (i < n) {
                const float t = v[m] * scale;
                yr[i] = w ? t * wv[m] : t;
            }
        }
    }
}

// tq_rope rotates, in place, the first nrot dimensions of each of the nheads heads (hd floats each)
// of T rows x[t*nheads*hd ...] at positions pos0+t, as ggml_rope_ext does: pair i has angle
// pos·theta_scale^i (repeated float multiplication, as ggml), optionally divided by freqs[i], with
// linear and YaRN scaling. neox selects the (i, i + nrot/2) pairing, otherwise (2i, 2i+1).
// A non-null posp replaces pos0 by *posp (a recorded graph replayed at later positions).
// Launch: grid = (nheads, T), block = nrot/2 (<= 1024).
extern "C" __global__ void tq_rope(float* x, int T, int nheads, int hd, int pos0, int nrot, int neox,
                                   float theta_scale, float freq_scale, float ext_factor, float attn_factor,
                                   float corr0, float corr1, const float* freqs, const int* posp) {
    const int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
    if (h >= nheads || t >= T || 2 * i >= nrot) return;
    if (posp) pos0 = *posp;
    float theta = (float)(pos0 + t);
    for (int j = 0; j < i; ++j) theta *= theta_scale;
    const float ff = freqs ? freqs[i] : 1.0f;
    const float theta_extrap = theta / ff;
    const float theta_interp = freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = attn_factor;
    if (ext_factor != 0.0f) {
        const float y = ((float)i - corr0) / fmaxf(0.001f, corr1 - corr0);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
        th = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    const float c = (float)cos((double)th) * mscale;
    const float s = (float)sin((double)th) * mscale;
    float* xh = x + ((u64)t * nheads + h) * hd;
    const int a = neox ? i : 2 * i;
    const int b = neox ? i + nrot / 2 : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = x0 * c - x1 * s;
    xh[b] = x0 * s + x1 * c;
}

// tq_swiglu: g[i] = silu(g[i]) * u[i] for i < n, silu(v) = v/(1+e^-v). Launch: 1-D, any geometry.
extern "C" __global__ void tq_swiglu(float* g, const float* u, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

// tq_add: y[i] += x[i] for i < n. Launch: 1-D, any geometry.
extern "C" __global__ void tq_add(float* y, const float* x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] += x[i];
}

// tq_add_rows: y[t*n + i] += b[i] for t < T, i < n (bias). Launch: 1-D over n*T, any geometry.
extern "C" __global__ void tq_add_rows(float* y, const float* b, int n, int T) {
    const u64 total = (u64)n * T;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x)
        y[i] += b[i % n];
}

// tq_kv_store converts T rows of keys (blockIdx.z = 0: x = k into kc, type kt) or values (1: v into
// vc, type vt), kvdim floats each and already rotated, to the cache type and stores them at cache
// rows pos0 .. pos0+T-1: type 1 (f16): halves, round to nearest even; type 8 (q8_0): per 32 values
// (kvdim % 32 == 0) ggml's quantize_row_q8_0: d = amax/127, q = round(x·(1/d)), stored as an f16
// d and 32 int8 (34 bytes; one warp per block). A non-null posp replaces pos0 by *posp, which
// must then lie in [0, ctx - T] (nothing is stored otherwise). Launch: grid = (ceil(kvdim/256), T,
// 2), block 256.
extern "C" __global__ void tq_kv_store(const float* k, const float* v, u8* kc, u8* vc, int pos0, int T, int kvdim,
                                       int kt, int vt, const int* posp, int ctx) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (i >= kvdim || r >= T) return; // whole warps: kvdim is a multiple of 32 for q8_0
    if (posp) {
        pos0 = *posp;
        if (pos0 < 0 || pos0 > ctx - T) return; // uniform for the launch
    }
    const bool isv = blockIdx.z != 0;
    const float x = (isv ? v : k)[(u64)r * kvdim + i];
    u8* c = isv ? vc : kc;
    if ((isv ? vt : kt) == 8) {
        const float amax = warp_max(fabsf(x));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        u8* b = c + (u64)(pos0 + r) * (kvdim >> 5) * 34 + (u64)(i >> 5) * 34;
        if ((i & 31) == 0) *(u16*)b = f2h(d);
        b[2 + (i & 31)] = (u8)(i8)roundf(x * id);
        return;
    }
    ((u16*)c)[(u64)(pos0 + r) * kvdim + i] = f2h(x);
}

// tq_gather_rows: dst[j] = src[idx[j]] for rows of n floats, j < count. Launch: grid = (ceil(n/256),
// count), block 256.
extern "C" __global__ void tq_gather_rows(float* dst, const float* src, const int* idx, int n, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (i >= n || j >= count) return;
    dst[(u64)j * n + i] = src[(u64)idx[j] * n + i];
}

// tq_scatter_rows: dst[idx[j]] = src[j] for rows of n floats, j < count. Launch as tq_gather_rows.
extern "C" __global__ void tq_scatter_rows(float* dst, const float* src, const int* idx, int n, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (i >= n || j >= count) return;
    dst[(u64)idx[j] * n + i] = src[(u64)j * n + i];
}

// tq_moe_combine: out[t] = Σ_j wts[t*k+j] · slot[t*k+j] (rows of n floats), summed in slot order as
// llama.cpp adds the weighted expert outputs. Launch: grid = (ceil(n/256), T), block 256.
extern "C" __global__ void tq_moe_combine(float* out, const float* slot, const float* wts, int T, int k, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (i >= n || t >= T) return;
    float s = 0.0f;
    for (int j = 0; j < k; ++j) {
        const float y = slot[((u64)t * k + j) * n + i] * wts[t * k + j];
        s = j == 0 ? y : s + y;
    }
    out[(u64)t * n + i] = s;
}
