// attention.cu: causal softmax attention over the on-device KV cache (f16 or q8_0 rows).
//
// Numerics follow the CPU runner (llama.cpp's non-flash-attention CPU path): with an f16 key cache
// the query head is rounded to f16, with a q8_0 key cache it is quantized to q8_0 blocks (as
// ggml's vec_dot_q8_0_q8_0 takes it); scores are float dot products of those values with the
// cached keys, softmax is float, and with an f16 value cache the probabilities are rounded to f16
// before they weight the values (a q8_0 value cache takes them unrounded, dequantizing each row).
#include "common.cuh"

#define ATTN_THREADS 256
#define ATTN_MAX_HD 256
#define KV_F16 1
#define KV_Q8_0 8

// kv_at returns element e of a cache row of type t (KV_F16: halves; KV_Q8_0: 34-byte blocks of an
// f16 scale and 32 int8 values).
__device__ __forceinline__ float kv_at(const u8* row, int t, int e) {
    if (t == KV_Q8_0) {
        const u8* b = row + (u64)(e >> 5) * 34;
        return h2f(ld_u16(b)) * (float)(i8)b[2 + (e & 31)];
    }
    return h2f(ld_u16(row + 2 * (u64)e));
}

// kv_row_bytes is the size of a cache row of n elements of type t.
__device__ __forceinline__ u64 kv_row_bytes(int t, int n) { return t == KV_Q8_0 ? (u64)(n >> 5) * 34 : (u64)n * 2; }

// tq_attn: for query row t (position pos0+t) and head h (KV head g = h / (nhead/nkv)):
//   s_u = scale · q[t,h]·K[u,g] for u <= pos0+t; p = softmax(s); out[t,h] = Σ_u p_u·V[u,g]
// with q rounded to the key type and p to f16 for an f16 value cache (see above). q and out hold
// T rows of nhead*hd floats; kc/vc hold ctx rows of nkv*hd elements of types kt/vt (KV_F16 or
// KV_Q8_0; q8_0 needs hd % 32 == 0); scores is scratch of T*nhead*ctx floats. Requires hd <= 256,
// nhead % nkv == 0, pos0+T <= ctx. A non-null posp replaces pos0 by *posp (a recorded graph
// replayed at later positions); outside [0, ctx - T] nothing is written. Launch: grid = (nhead,
// T), block = 256.
extern "C" __global__ void tq_attn(const float* q, const u8* kc, const u8* vc, float* out, float* scores,
                                   int T, int pos0, int nhead, int nkv, int hd, int ctx, float scale, int kt, int vt,
                                   const int* posp) {
    __shared__ float qs[ATTN_MAX_HD];
    __shared__ float red[ATTN_THREADS];
    __shared__ float sh[32];
    const int h = blockIdx.x, t = blockIdx.y;
    if (h >= nhead || t >= T) return; // uniform for the block
    if (posp) {
        pos0 = *posp;
        if (pos0 < 0 || pos0 > ctx - T) return; // uniform for the launch
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int g = h / (nhead / nkv);
    const int L = pos0 + t + 1;
    const u64 krow = kv_row_bytes(kt, nkv * hd), vrow = kv_row_bytes(vt, nkv * hd);
    const float* qh = q + ((u64)t * nhead + h) * hd;
    if (kt == KV_Q8_0) {
        // q8_0 blocks of the query head: d = amax/127, q = round(x/d), value q·f16(d)
        float v = 0.0f;
        if (tid < hd) {
            const int b0 = tid & ~31;
            float amax = 0.0f;
            for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(qh[b0 + j]));
            const float d = amax / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            v = roundf(qh[tid] * id) * h2f(f2h(d));
        }
        if (tid < hd) qs[tid] = v;
    } else {
        for (int i = tid; i < hd; i += blockDim.x) qs[i] = h2f(f2h(qh[i]));
    }
    __syncthreads();
    float* sc = scores + ((u64)t * nhead + h) * ctx;

    // Scores: one warp per key position.
    float mx = -3.402823466e38f;
    for (int u = warp; u < L; u += nwarps) {
        const u8* kr = kc + (u64)u * krow;
        float d = 0.0f;
        for (int i = lane; i < hd; i += 32) d += qs[i] * kv_at(kr, kt, g * hd + i);
        d = warp_sum(d) * scale;
        if (lane == 0) sc[u] = d;
        mx = fmaxf(mx, d);
    }
    mx = block_max(mx, sh); // includes a barrier: the scores above are visible from here on

    float sum = 0.0f;
    for (int u = tid; u < L; u += blockDim.x) {
        const float e = expf(sc[u] - mx);
        sc[u] = e;
        sum += e;
    }
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    __syncthreads();

    // Output: thread (grp, i) accumulates dimension i over positions grp, grp+ng, ...
    const int ng = blockDim.x / hd;
    const int grp = tid / hd, i = tid - grp * hd;
    float a = 0.0f;
    if (grp < ng) {
        for (int u = grp; u < L; u += ng) {
            const float p = vt == KV_F16 ? h2f(f2h(sc[u] * inv)) : sc[u] * inv;
            a += p * kv_at(vc + (u64)u * vrow, vt, g * hd + i);
        }
    }
    red[tid] = a;
    __syncthreads();
    if (grp == 0) {
        float o = red[i];
        for (int j = 1; j < ng; ++j) o += red[j * hd + i];
        out[((u64)t * nhead + h) * hd + i] = o;
    }
}
