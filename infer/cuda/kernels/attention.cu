// attention.cu: causal softmax attention over the on-device KV cache (f16 or q8_0 rows).
//
// Numerics follow the CPU runner (llama.cpp's non-flash-attention CPU path): with an f16 key cache
// the query head is rounded to f16, with a q8_0 key cache it is quantized to q8_0 blocks (as
// ggml's vec_dot_q8_0_q8_0 takes it); scores are float dot products of those values with the
// cached keys, softmax is float, and with an f16 value cache the probabilities are rounded to f16
// before they weight the values (a q8_0 value cache takes them unrounded, dequantizing each row).
#include "common.cuh"

#define ATTN_THREADS 512
#define ATTN_MAX_HD 256
#define KV_F16 1
#define KV_Q8_0 8
// AT_KEYS: keys a warp scores per pass; AT_ROWS: value rows a thread loads per pass.
#define AT_KEYS 4
#define AT_ROWS 8

// kv_at returns element e of a cache row of type KT (KV_F16: halves; KV_Q8_0: 34-byte blocks of
// an f16 scale and 32 int8 values). The type is a template parameter so that the attention loops
// are branch-free and their loads can be issued together.
template <int KT>
__device__ __forceinline__ float kv_at(const u8* row, int e) {
    if (KT == KV_Q8_0) {
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
// T), block = ATTN_THREADS (512: 16 warps score keys, and with hd = 128 four groups of threads
// share the positions of the output sum).
template <int KT, int VT>
__device__ __forceinline__ void attn(const float* q, const u8* kc, const u8* vc, float* out, float* scores, int T,
                                     int pos0, int nhead, int nkv, int hd, int ctx, float scale, float* qs, float* red,
                                     float* sh) {
    const int h = blockIdx.x, t = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int g = h / (nhead / nkv);
    const int L = pos0 + t + 1;
    const u64 krow = kv_row_bytes(KT, nkv * hd), vrow = kv_row_bytes(VT, nkv * hd);
    const float* qh = q + ((u64)t * nhead + h) * hd;
    if (KT == KV_Q8_0) {
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

    // Scores: one warp per key position, AT_KEYS keys per pass with all their loads issued first
    // (lane i holds elements i, i+32, ... of the head: at most ATTN_MAX_HD/32).
    float mx = -3.402823466e38f;
    for (int u0 = warp; u0 < L; u0 += AT_KEYS * nwarps) {
        float kv[AT_KEYS][ATTN_MAX_HD / 32];
#pragma unroll
        for (int m = 0; m < AT_KEYS; ++m) {
            const int u = u0 + m * nwarps;
            const u8* kr = kc + (u64)u * krow;
#pragma unroll
            for (int c = 0; c < ATTN_MAX_HD / 32; ++c) {
                const int i = lane + 32 * c;
                kv[m][c] = u < L && i < hd ? kv_at<KT>(kr, g * hd + i) : 0.0f;
            }
        }
#pragma unroll
        for (int m = 0; m < AT_KEYS; ++m) {
            const int u = u0 + m * nwarps;
            if (u >= L) break; // uniform for the warp
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < ATTN_MAX_HD / 32; ++c) {
                const int i = lane + 32 * c;
                if (i < hd) d += qs[i] * kv[m][c];
            }
            d = warp_sum(d) * scale;
            if (lane == 0) sc[u] = d;
            mx = fmaxf(mx, d);
        }
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
        // AT_ROWS positions' probabilities and values loaded before any is used, then added in
        // position order.
        for (int u0 = grp; u0 < L; u0 += AT_ROWS * ng) {
            float pv[AT_ROWS], vv[AT_ROWS];
#pragma unroll
            for (int m = 0; m < AT_ROWS; ++m) {
                const int u = u0 + m * ng;
                pv[m] = u < L ? sc[u] : 0.0f;
                vv[m] = u < L ? kv_at<VT>(vc + (u64)u * vrow, g * hd + i) : 0.0f;
            }
#pragma unroll
            for (int m = 0; m < AT_ROWS; ++m) {
                if (u0 + m * ng >= L) break;
                const float p = VT == KV_F16 ? h2f(f2h(pv[m] * inv)) : pv[m] * inv;
                a += p * vv[m];
            }
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

extern "C" __global__ void tq_attn(const float* q, const u8* kc, const u8* vc, float* out, float* scores,
                                   int T, int pos0, int nhead, int nkv, int hd, int ctx, float scale, int kt, int vt,
                                   const int* posp) {
    __shared__ float qs[ATTN_MAX_HD];
    __shared__ float red[ATTN_THREADS];
    __shared__ float sh[32];
    if ((int)blockIdx.x >= nhead || (int)blockIdx.y >= T) return; // uniform for the block
    if (posp) {
        pos0 = *posp;
        if (pos0 < 0 || pos0 > ctx - T) return; // uniform for the launch
    }
    if (kt == KV_Q8_0) {
        if (vt == KV_Q8_0) attn<KV_Q8_0, KV_Q8_0>(q, kc, vc, out, scores, T, pos0, nhead, nkv, hd, ctx, scale, qs, red, sh);
        else attn<KV_Q8_0, KV_F16>(q, kc, vc, out, scores, T, pos0, nhead, nkv, hd, ctx, scale, qs, red, sh);
    } else {
        if (vt == KV_Q8_0) attn<KV_F16, KV_Q8_0>(q, kc, vc, out, scores, T, pos0, nhead, nkv, hd, ctx, scale, qs, red, sh);
        else attn<KV_F16, KV_F16>(q, kc, vc, out, scores, T, pos0, nhead, nkv, hd, ctx, scale, qs, red, sh);
    }
}
