// hybrid.cu: the operations of the Qwen3.5 / Qwen3.6 hybrid blocks (qwen35, qwen35moe) that the
// dense kernels do not cover, following package infer's arch_qwen35moe.go and deltanet.go:
// the Gated DeltaNet (causal convolution with its rolling state, L2-normalised query/key heads,
// the β and decay gates, the gated delta rule with a per-value-head state), the gated
// attention's query/gate split and sigmoid gate, the shared expert's per-token sigmoid gate, and
// clearing a state buffer.
#include "common.cuh"

// DR_MAX_DS bounds the delta rule's head size (ssm.state_size; 128 in the released models):
// the key and query of the current token are staged in shared memory.
#define DR_MAX_DS 256

// sigmoidf is 1/(1+e^-v), as the CPU runner's sigmoid.
__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

// tq_ssm_conv: the depthwise causal convolution of T rows of C channels followed by SiLU:
// out[t][c] = silu(Σ_{i<K} w[c*K+i] · u[t+i][c]) where u is the K-1 state rows (oldest first)
// followed by the T rows of x; then the state becomes the last K-1 rows of u. Each thread owns
// one channel, so the in-place state update (row r takes u[T+r], a later row) is race-free.
// Launch: grid = ceil(C/256), block 256.
extern "C" __global__ void tq_ssm_conv(const float* x, float* state, const float* w, float* out, int T, int C, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int km = K - 1;
    const float* wc = w + (u64)c * K;
    for (int t = 0; t < T; ++t) {
        float s = 0.0f;
        for (int i = 0; i < K; ++i) {
            const int r = t + i; // row of u
            const float u = r < km ? state[(u64)r * C + c] : x[(u64)(r - km) * C + c];
            s += u * wc[i];
        }
        out[(u64)t * C + c] = s / (1.0f + expf(-s));
    }
    for (int r = 0; r < km; ++r) {
        const int q = T + r;
        state[(u64)r * C + c] = q < km ? state[(u64)q * C + c] : x[(u64)(q - km) * C + c];
    }
}

// tq_l2norm: x / max(sqrt(Σx²), eps) in place over `heads` consecutive heads of d floats at the
// start of each of T rows of `stride` floats (the query and key heads of the convolved q|k|v rows).
// Launch: grid = (heads, T), block 256.
extern "C" __global__ void tq_l2norm(float* x, int d, int heads, int T, int stride, float eps) {
    __shared__ float sh[32];
    const int h = blockIdx.x, t = blockIdx.y;
    if (h >= heads || t >= T) return; // uniform for the block
    float* v = x + (u64)t * stride + (u64)h * d;
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += v[i] * v[i];
    s = block_sum(s, sh);
    const float scale = 1.0f / fmaxf(sqrtf(s), eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) v[i] *= scale;
}

// tq_deltanet_gates turns n = T·hv raw projections in place into the write strengths β = σ(b)
// and the log decays g = softplus(a + dt_bias[j])·ssm_a[j] (softplus(v) = log(1+e^v), v above 20),
// j the value head. Launch: 1-D, any geometry.
extern "C" __global__ void tq_deltanet_gates(float* b, float* a, const float* dt_bias, const float* ssm_a, int hv, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int j = i % hv;
        b[i] = sigmoidf(b[i]);
        const float v = a[i] + dt_bias[j];
        a[i] = (v > 20.0f ? v : logf(1.0f + expf(v))) * ssm_a[j];
    }
}

// DR_SPLIT is the threads per state column of tq_delta_rule, DR_BATCH the state elements a
// thread loads before it uses any (loads in flight).
#define DR_SPLIT 4
#define DR_BATCH 8

// dr_load_column loads the state elements S[a][j] of rows a = a0, a0 + DR_SPLIT, ... (DR_BATCH
// of them; 0 past the last row) into sv, all loads issued before any is used.
__device__ __forceinline__ void dr_load_column(const float* S, int a0, int ds, int j, float* sv) {
#pragma unroll
    for (int m = 0; m < DR_BATCH; ++m) {
        const int a = a0 + m * DR_SPLIT;
        sv[m] = a < ds ? S[(u64)a * ds + j] : 0.0f;
    }
}

// tq_delta_rule runs the gated delta rule of value head h = blockIdx.x over T tokens. qkv holds T
// rows of `stride` floats: kdim query values, kdim key values (L2-normalised heads of ds), then
// the value heads; value head h reads key head h mod hk. beta and g hold T rows of hv. The state
// of head h is S (ds×ds) stored column-major per head: st[h*ds*ds + a*ds + j] = S[a][j], so that
// a warp's reads are coalesced. Per token: S ← e^g·S; δ_j = β·(v_j − Σ_a S[a][j]·k_a);
// S[a][j] += k_a·δ_j; out_j = scale·Σ_a S[a][j]·q_a. out holds T rows of hv·ds.
//
// Column j is shared by DR_SPLIT threads p (thread p·ds + j takes the rows a ≡ p mod DR_SPLIT,
// always the same ones), and each token reads the state once before writing it: with the old
// state's sums Σ_a S[a][j]·k_a and Σ_a S[a][j]·q_a, δ_j = β·(v_j − e^g·Σ S·k) and
// out_j = scale·(e^g·Σ S·q + δ_j·(k·q)), the same quantities as the definition above in another
// order of rounding. Loads are issued DR_BATCH at a time, so a token costs a few memory round
// trips instead of two per state row.
// Launch: grid = hv, block = DR_SPLIT·ds (ds <= DR_MAX_DS).
extern "C" __global__ void tq_delta_rule(const float* qkv, const float* beta, const float* g, float* st, float* out,
                                         int T, int ds, int hk, int hv, int stride, float scale) {
    __shared__ float kk[DR_MAX_DS];
    __shared__ float qq[DR_MAX_DS];
    __shared__ float rk[DR_SPLIT * DR_MAX_DS];
    __shared__ float rq[DR_SPLIT * DR_MAX_DS];
    const int h = blockIdx.x;
    if (h >= hv || ds > DR_MAX_DS) return; // uniform for the block
    const int p = threadIdx.x / ds, j = threadIdx.x - p * ds;
    const bool active = p < DR_SPLIT;
    const int kdim = hk * ds, kh = h % hk;
    float* S = st + (u64)h * ds * ds;
    for (int t = 0; t < T; ++t) {
        const float* row = qkv + (u64)t * stride;
        __syncthreads(); // the previous token's k, q and partial sums are no longer read
        if (p == 0) {
            qq[j] = row[kh * ds + j];
            kk[j] = row[kdim + kh * ds + j];
        }
        __syncthreads();
        float sk = 0.0f, sq = 0.0f;
        if (active) {
            for (int a0 = p; a0 < ds; a0 += DR_SPLIT * DR_BATCH) {
                float sv[DR_BATCH];
                dr_load_column(S, a0, ds, j, sv);
#pragma unroll
                for (int m = 0; m < DR_BATCH; ++m) {
                    const int a = a0 + m * DR_SPLIT;
                    if (a < ds) {
                        sk += sv[m] * kk[a];
                        sq += sv[m] * qq[a];
                    }
                }
            }
            rk[p * ds + j] = sk;
            rq[p * ds + j] = sq;
        }
        __syncthreads();
        if (!active) continue;
        sk = rk[j];
        sq = rq[j];
#pragma unroll
        for (int i = 1; i < DR_SPLIT; ++i) {
            sk += rk[i * ds + j];
            sq += rq[i * ds + j];
        }
        const float decay = expf(g[(u64)t * hv + h]);
        const float b = beta[(u64)t * hv + h];
        const float delta = (row[2 * kdim + h * ds + j] - decay * sk) * b;
        if (p == 0) { // only the output's writers need k·q
            float kq = 0.0f;
            for (int a = 0; a < ds; ++a) kq += kk[a] * qq[a];
            out[(u64)t * hv * ds + h * ds + j] = scale * (decay * sq + delta * kq);
        }
        for (int a0 = p; a0 < ds; a0 += DR_SPLIT * DR_BATCH) {
            float sv[DR_BATCH];
            dr_load_column(S, a0, ds, j, sv);
#pragma unroll
            for (int m = 0; m < DR_BATCH; ++m) {
                const int a = a0 + m * DR_SPLIT;
                if (a < ds) S[(u64)a * ds + j] = sv[m] * decay + kk[a] * delta;
            }
        }
    }
}

// DR_CHUNK is the tokens tq_delta_rule_chunked handles together.
#define DR_CHUNK 16

// tq_delta_rule_chunked is tq_delta_rule for a batch of tokens, DR_CHUNK at a time: with S0 the
// state at a chunk's start and G_t the cumulative log decay of its tokens up to t, the chunk's
// writes δ_t solve the lower-triangular system
//   δ_t = β_t·(v_t − e^{G_t}·S0ᵀk_t − Σ_{s<t} e^{G_t−G_s}·(k_t·k_s)·δ_s),
// the outputs are o_t = scale·(e^{G_t}·S0ᵀq_t + Σ_{s<=t} e^{G_t−G_s}·(q_t·k_s)·δ_s), and the state
// becomes e^{G_c}·S0 + Σ_s e^{G_c−G_s}·k_s·δ_sᵀ: the same recurrence as tq_delta_rule, with the
// state read twice per chunk instead of twice per token. Thread j owns value channel j (its δ,
// S0ᵀk and S0ᵀq of the chunk's tokens in registers); the chunk's keys, queries and their dot
// products are in shared memory. Same arguments and launch as tq_delta_rule.
extern "C" __global__ void tq_delta_rule_chunked(const float* qkv, const float* beta, const float* g, float* st, float* out,
                                                 int T, int ds, int hk, int hv, int stride, float scale) {
    __shared__ float kk[DR_CHUNK * DR_MAX_DS];
    __shared__ float qq[DR_CHUNK * DR_MAX_DS];
    __shared__ float kdot[DR_CHUNK * DR_CHUNK]; // kdot[t*C+s] = k_t·k_s (s < t)
    __shared__ float qdot[DR_CHUNK * DR_CHUNK]; // qdot[t*C+s] = q_t·k_s (s <= t)
    __shared__ float G[DR_CHUNK];
    __shared__ float B[DR_CHUNK];
    const int h = blockIdx.x, j = threadIdx.x;
    if (h >= hv || ds > DR_MAX_DS) return; // uniform for the block
    const int kdim = hk * ds, kh = h % hk;
    float* S = st + (u64)h * ds * ds;
    for (int t0 = 0; t0 < T; t0 += DR_CHUNK) {
        const int c = T - t0 < DR_CHUNK ? T - t0 : DR_CHUNK;
        __syncthreads(); // the previous chunk's shared data is no longer read
        for (int i = j; i < c * ds; i += blockDim.x) {
            const int t = i / ds, a = i - t * ds;
            const float* row = qkv + (u64)(t0 + t) * stride;
            qq[i] = row[kh * ds + a];
            kk[i] = row[kdim + kh * ds + a];
        }
        if (j == 0) {
            float acc = 0.0f;
            for (int t = 0; t < c; ++t) {
                acc += g[(u64)(t0 + t) * hv + h];
                G[t] = acc;
                B[t] = beta[(u64)(t0 + t) * hv + h];
            }
        }
        __syncthreads();
        for (int p = j; p < c * c; p += blockDim.x) {
            const int t = p / c, s = p - t * c;
            if (s > t) continue;
            float dk = 0.0f, dq = 0.0f;
            for (int a = 0; a < ds; ++a) {
                dk += kk[t * ds + a] * kk[s * ds + a];
                dq += qq[t * ds + a] * kk[s * ds + a];
            }
            kdot[t * DR_CHUNK + s] = dk;
            qdot[t * DR_CHUNK + s] = dq;
        }
        __syncthreads();
        if (j < ds) {
            // per-token arrays indexed by unrolled constants only, so that they stay in registers
            float u[DR_CHUNK], w[DR_CHUNK], d[DR_CHUNK];
#pragma unroll
            for (int t = 0; t < DR_CHUNK; ++t) u[t] = w[t] = d[t] = 0.0f;
            for (int a = 0; a < ds; ++a) { // S0ᵀk_t and S0ᵀq_t for channel j
                const float s0 = S[(u64)a * ds + j];
#pragma unroll
                for (int t = 0; t < DR_CHUNK; ++t) {
                    if (t < c) {
                        u[t] += kk[t * ds + a] * s0;
                        w[t] += qq[t * ds + a] * s0;
                    }
                }
            }
#pragma unroll
            for (int t = 0; t < DR_CHUNK; ++t) {
                if (t < c) {
                    float r = expf(G[t]) * u[t];
#pragma unroll
                    for (int s = 0; s < t; ++s) r += expf(G[t] - G[s]) * kdot[t * DR_CHUNK + s] * d[s];
                    d[t] = B[t] * (qkv[(u64)(t0 + t) * stride + 2 * kdim + h * ds + j] - r);
                    float o = expf(G[t]) * w[t];
#pragma unroll
                    for (int s = 0; s <= t; ++s) o += expf(G[t] - G[s]) * qdot[t * DR_CHUNK + s] * d[s];
                    out[(u64)(t0 + t) * hv * ds + h * ds + j] = o * scale;
                }
            }
            const float gc = G[c - 1];
#pragma unroll
            for (int t = 0; t < DR_CHUNK; ++t) d[t] = t < c ? d[t] * expf(gc - G[t]) : 0.0f;
            const float dec = expf(gc);
            for (int a = 0; a < ds; ++a) {
                float s1 = dec * S[(u64)a * ds + j];
#pragma unroll
                for (int t = 0; t < DR_CHUNK; ++t) {
                    if (t < c) s1 += kk[t * ds + a] * d[t];
                }
                S[(u64)a * ds + j] = s1;
            }
        }
    }
}

// tq_split_heads splits T rows of heads×(2·hd) floats (per head: hd query values, then hd gate
// values, as the gated attention's q projection yields them) into a (query) and b (gate), each T
// rows of heads×hd. Launch: grid = (ceil(heads*hd/256), T), block 256.
extern "C" __global__ void tq_split_heads(const float* src, float* a, float* b, int hd, int heads, int T) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    const int n = heads * hd;
    if (i >= n || t >= T) return;
    const int h = i / hd, e = i - h * hd;
    const u64 s = (u64)t * 2 * n + (u64)h * 2 * hd + e;
    a[(u64)t * n + i] = src[s];
    b[(u64)t * n + i] = src[s + hd];
}

// tq_sigmoid_mul: y[i] *= σ(g[i]) for i < n (the gated attention's output gate). Launch: 1-D, any
// geometry.
extern "C" __global__ void tq_sigmoid_mul(float* y, const float* g, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] *= sigmoidf(g[i]);
}

// tq_row_sigmoid_scale: y[t*n+i] *= σ(s[t]) for t < T, i < n (the shared expert's gate).
// Launch: grid = (ceil(n/256), T), block 256.
extern "C" __global__ void tq_row_sigmoid_scale(float* y, const float* s, int n, int T) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (i >= n || t >= T) return;
    y[(u64)t * n + i] *= sigmoidf(s[t]);
}

// tq_zero: y[i] = 0 for i < n (recurrent states at a sequence start). Launch: 1-D, any geometry.
extern "C" __global__ void tq_zero(float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = 0.0f;
}
