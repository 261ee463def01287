// moe.cu: mixture-of-experts routing.
#include "common.cuh"

#define MOE_THREADS 256
#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_K 64

// tq_moe_route: for each token t, p = softmax(logits[t]) over nexp experts (float), then the k
// largest p in descending order (ties: lower expert index) go to sel[t*k + j], with weights
// wts[t*k + j] = p / max(Σ_selected p, 6.103515625e-5) when renorm != 0, else p.
// Requires nexp <= 1024, 1 <= k <= min(nexp, 64). Launch: grid.x = T, block = 256.
extern "C" __global__ void tq_moe_route(const float* logits, int* sel, float* wts, int T, int nexp, int k, int renorm) {
    __shared__ float p[MOE_MAX_EXPERTS];
    __shared__ float topv[MOE_MAX_K];
    __shared__ float sh[32];
    __shared__ int shi[32];
    const int t = blockIdx.x, tid = threadIdx.x;
    if (t >= T) return; // uniform for the block
    const float* lg = logits + (u64)t * nexp;
    float mx = -3.402823466e38f;
    for (int e = tid; e < nexp; e += blockDim.x) {
        p[e] = lg[e];
        mx = fmaxf(mx, p[e]);
    }
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int e = tid; e < nexp; e += blockDim.x) {
        const float v = expf(p[e] - mx);
        p[e] = v;
        sum += v;
    }
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    for (int e = tid; e < nexp; e += blockDim.x) p[e] *= inv;
    __syncthreads();

    for (int j = 0; j < k; ++j) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = tid; e < nexp; e += blockDim.x) {
            const float v = p[e];
            if (v >= 0.0f && (bi < 0 || better(v, e, bv, bi))) {
                bv = v;
                bi = e;
            }
        }
        const int best = block_argmax(bv, bi, sh, shi);
        if (tid == 0) {
            // best < 0 only when every remaining p is NaN (non-finite logits): report -1, weight 0.
            sel[t * k + j] = best;
            topv[j] = best >= 0 ? p[best] : 0.0f;
            if (best >= 0) p[best] = -1.0f; // taken (probabilities are >= 0)
        }
        __syncthreads();
    }
    if (tid == 0) {
        float den = 1.0f;
        if (renorm) {
            double s = 0.0;
            for (int j = 0; j < k; ++j) s += (double)topv[j];
            den = fmaxf((float)s, 6.103515625e-5f);
        }
        for (int j = 0; j < k; ++j) wts[t * k + j] = renorm ? topv[j] / den : topv[j];
    }
}
