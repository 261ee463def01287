// attention.cu: causal softmax attention over the on-device f16 KV cache.
//
// Numerics follow the CPU runner with an f16 cache (llama.cpp's non-flash-attention CPU path): the
// query head is rounded to f16, scores are f16·f16 dot products in float, softmax is float, and the
// probabilities are rounded to f16 before they weight the f16 values.
#include "common.cuh"

#define ATTN_THREADS 256
#define ATTN_MAX_HD 256

// tq_attn_f16: for query row t (position pos0+t) and head h (KV head g = h / (nhead/nkv)):
//   s_u = scale · q[t,h]·K[u,g] for u <= pos0+t; p = softmax(s); out[t,h] = Σ_u f16(p_u)·V[u,g].
// q and out hold T rows of nhead*hd floats; kc/vc hold ctx rows of nkv*hd halves; scores is scratch
// of T*nhead*ctx floats. Requires hd <= 256, nhead % nkv == 0, pos0+T <= ctx.
// Launch: grid = (nhead, T), block = 256.
extern "C" __global__ void tq_attn_f16(const float* q, const u16* kc, const u16* vc, float* out, float* scores,
                                       int T, int pos0, int nhead, int nkv, int hd, int ctx, float scale) {
    __shared__ float qs[ATTN_MAX_HD];
    __shared__ float red[ATTN_THREADS];
    __shared__ float sh[32];
    const int h = blockIdx.x, t = blockIdx.y;
    if (h >= nhead || t >= T) return; // uniform for the block
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int g = h / (nhead / nkv);
    const int L = pos0 + t + 1;
    const u64 kvstride = (u64)nkv * hd;
    const float* qh = q + ((u64)t * nhead + h) * hd;
    for (int i = tid; i < hd; i += blockDim.x) qs[i] = h2f(f2h(qh[i]));
    __syncthreads();
    float* sc = scores + ((u64)t * nhead + h) * ctx;

    // Scores: one warp per key position.
    float mx = -3.402823466e38f;
    for (int u = warp; u < L; u += nwarps) {
        const u16* kr = kc + (u64)u * kvstride + (u64)g * hd;
        float d = 0.0f;
        for (int i = lane; i < hd; i += 32) d += qs[i] * h2f(kr[i]);
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
            const float p = h2f(f2h(sc[u] * inv));
            a += p * h2f(vc[(u64)u * kvstride + (u64)g * hd + i]);
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
