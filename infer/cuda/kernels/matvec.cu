// matvec.cu: y = W·x for GGUF weight blocks read in place.
//
// W has nrows rows of n elements in one GGUF block format (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, F16, BF16
// or F32), rows packed back to back exactly as in the file. x holds T activation rows of n floats
// (x[t*n + i]) and y receives T rows of nrows floats (y[t*nrows + r]). Weights are dequantized in
// registers and multiplied with float32 activations; every weight byte is read once per launch, so
// the small-batch variants (T up to MV_MAX_T) cost about as much memory traffic as T = 1.
//
// Launch: block = 32*MV_WARPS threads, grid.x = ceil(nrows / (MV_WARPS·R)); a warp takes R rows:
// R = MV_R for tq_mv_<type>_t1 and tq_mv_<type>_ids of the quantized types, else 1.
// Kernels tq_mv_<type>_t1 require T == 1, tq_mv_<type>_t8 accept 1 <= T <= 8.
#include "common.cuh"

#define MV_WARPS 4
#define MV_MAX_T 8
#define MV_R 2

// Per-type lane work. Each function adds this lane's share of row `w` (nb blocks) dotted with the
// T activation rows into acc[0..T).
//
// Memory-level parallelism: a lane's blocks are visited MV_U at a time, all their weight bytes
// loaded before any is used, so each lane has MV_U independent loads in flight instead of one
// chain of load-then-multiply per block (a decode mat-vec of n = 4096 has 8 to 16 blocks per
// lane, and a chain of that many DRAM round trips bounded the kernels near a third of the copy
// bandwidth). The arithmetic, and so the result, is the same as one block at a time: every
// block's products are added to acc in the same order.
#define MV_U 4

// byte_of returns byte k (0..3) of w.
__device__ __forceinline__ u32 byte_of(u32 w, int k) { return (w >> (8 * k)) & 255; }

// u16 pair loads for blocks that are only 2-byte aligned: the 32 bits at p (p even).
__device__ __forceinline__ u32 ld_u16x2(const u8* p) { return (u32)ld_u16(p) | ((u32)ld_u16(p + 2) << 16); }

// Q4_K: 144-byte super-blocks of 256: d, dmin (f16), scales[12] (6-bit scale/min pairs), qs[128].
// Half a warp per super-block: lane l16 = 4c+i takes qs[32c + 8i .. +8): elements 64c+8i+k (low
// nibbles, sub-block 2c) and 64c+32+8i+k (high nibbles, sub-block 2c+1).
//
// scale_min_k4 decodes the 6-bit scale and min of sub-block j (0..7) from the twelve scale bytes
// held as three words s0 (bytes 0..3), s1 (4..7), s2 (8..11).
__device__ __forceinline__ void scale_min_k4(int j, u32 s0, u32 s1, u32 s2, float* sc, float* m) {
    if (j < 4) {
        *sc = u2f(byte_of(s0, j) & 63);
        *m = u2f(byte_of(s1, j) & 63);
    } else {
        const int k = j - 4;
        *sc = u2f((byte_of(s2, k) & 15) | ((byte_of(s0, k) >> 6) << 4));
        *m = u2f((byte_of(s2, k) >> 4) | ((byte_of(s1, k) >> 6) << 4));
    }
}

// The quantized lane functions take R rows (R = MV_R for the single-row kernels, else 1) at w,
// w + rb, ..., of which the first rv exist: each activation element is loaded once for all R rows
// (the activation loads, seven times the weight bytes for Q4_K, bounded every type near 9 TB/s
// of L1 traffic), and the R·U blocks of a pass, U = MV_U/R, are loaded before any is used.
// k4_head is the first 16 bytes of a Q4_K or Q5_K super-block: d and dmin (f16), then the twelve
// scale bytes.
struct k4_head {
    u32 dd, s0, s1, s2;
};

__device__ __forceinline__ k4_head ld_k4_head(const u8* b) {
    k4_head h;
    h.dd = ld_u32(b);
    h.s0 = ld_u32(b + 4);
    h.s1 = ld_u32(b + 8);
    h.s2 = ld_u32(b + 12);
    return h;
}

// k4_scales decodes d, dmin and the scale and min of sub-blocks 2c (sc1, m1) and 2c+1 (sc2, m2).
__device__ __forceinline__ void k4_scales(const k4_head& h, int c, float* d, float* dmin, float* sc1, float* m1,
                                          float* sc2, float* m2) {
    *d = h2f((u16)(h.dd & 0xffff));
    *dmin = h2f((u16)(h.dd >> 16));
    scale_min_k4(2 * c, h.s0, h.s1, h.s2, sc1, m1);
    scale_min_k4(2 * c + 1, h.s0, h.s1, h.s2, sc2, m2);
}

// k4_x loads the activations a lane of a Q4_K/Q5_K super-block multiplies, xl[0..8) (low
// sub-block) and xl[32..40) (high), and their sums.
struct k4_x {
    float4 a0, a1, b0, b1;
    float slo, shi;
};

__device__ __forceinline__ k4_x ld_k4_x(const float* xl) {
    k4_x v;
    v.a0 = ld_f4(xl);
    v.a1 = ld_f4(xl + 4);
    v.b0 = ld_f4(xl + 32);
    v.b1 = ld_f4(xl + 36);
    v.slo = v.a0.x + v.a0.y + v.a0.z + v.a0.w + v.a1.x + v.a1.y + v.a1.z + v.a1.w;
    v.shi = v.b0.x + v.b0.y + v.b0.z + v.b0.w + v.b1.x + v.b1.y + v.b1.z + v.b1.w;
    return v;
}

template <int NT, int R>
__device__ __forceinline__ void lane_q4_k(const u8* w, u64 rb, int rv, int nb, const float* x, int n, int T,
                                          float (&acc)[R][NT]) {
    constexpr int U = MV_U / R;
    const int lane = threadIdx.x & 31;
    const int half = lane >> 4, l16 = lane & 15, c = l16 >> 2, i = l16 & 3;
    for (int ib0 = half; ib0 < nb; ib0 += 2 * U) {
        k4_head hd[R][U] = {};
        u32 q0[R][U] = {}, q1[R][U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (ib < nb && r < rv) {
                    const u8* b = w + r * rb + (u64)ib * 144;
                    hd[r][u] = ld_k4_head(b);
                    const u8* q = b + 16 + 32 * c + 8 * i;
                    q0[r][u] = ld_u32(q);
                    q1[r][u] = ld_u32(q + 4);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
            if (ib >= nb) break;
            float d[R], dmin[R], sc1[R], m1[R], sc2[R], m2[R];
#pragma unroll
            for (int r = 0; r < R; ++r) k4_scales(hd[r][u], c, &d[r], &dmin[r], &sc1[r], &m1[r], &sc2[r], &m2[r]);
            const int e0 = ib * 256 + 64 * c + 8 * i;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const k4_x v = ld_k4_x(x + (u64)t * n + e0);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= rv) break;
                    const u32 qa = q0[r][u], qb = q1[r][u];
                    const float lo = u2f(qa & 15) * v.a0.x + u2f((qa >> 8) & 15) * v.a0.y +
                                     u2f((qa >> 16) & 15) * v.a0.z + u2f((qa >> 24) & 15) * v.a0.w +
                                     u2f(qb & 15) * v.a1.x + u2f((qb >> 8) & 15) * v.a1.y +
                                     u2f((qb >> 16) & 15) * v.a1.z + u2f((qb >> 24) & 15) * v.a1.w;
                    const float hi = u2f((qa >> 4) & 15) * v.b0.x + u2f((qa >> 12) & 15) * v.b0.y +
                                     u2f((qa >> 20) & 15) * v.b0.z + u2f((qa >> 28) & 15) * v.b0.w +
                                     u2f((qb >> 4) & 15) * v.b1.x + u2f((qb >> 12) & 15) * v.b1.y +
                                     u2f((qb >> 20) & 15) * v.b1.z + u2f((qb >> 28) & 15) * v.b1.w;
                    acc[r][t] += d[r] * (sc1[r] * lo + sc2[r] * hi) - dmin[r] * (m1[r] * v.slo + m2[r] * v.shi);
                }
            }
        }
    }
}

// Q5_K: 176-byte super-blocks: d, dmin, scales[12] (as Q4_K), qh[32], qs[128]. The fifth bit of
// element 64c+l (l < 32) is bit 2c of qh[l]; of element 64c+32+l it is bit 2c+1.
template <int NT, int R>
__device__ __forceinline__ void lane_q5_k(const u8* w, u64 rb, int rv, int nb, const float* x, int n, int T,
                                          float (&acc)[R][NT]) {
    constexpr int U = MV_U / R;
    const int lane = threadIdx.x & 31;
    const int half = lane >> 4, l16 = lane & 15, c = l16 >> 2, i = l16 & 3;
    for (int ib0 = half; ib0 < nb; ib0 += 2 * U) {
        k4_head hd[R][U] = {};
        u32 q0[R][U] = {}, q1[R][U] = {}, h0[R][U] = {}, h1[R][U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (ib < nb && r < rv) {
                    const u8* b = w + r * rb + (u64)ib * 176;
                    hd[r][u] = ld_k4_head(b);
                    const u8* q = b + 48 + 32 * c + 8 * i;
                    q0[r][u] = ld_u32(q);
                    q1[r][u] = ld_u32(q + 4);
                    const u8* hp = b + 16 + 8 * i;
                    h0[r][u] = ld_u32(hp);
                    h1[r][u] = ld_u32(hp + 4);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
            if (ib >= nb) break;
            float d[R], dmin[R], sc1[R], m1[R], sc2[R], m2[R], vlo[R][8], vhi[R][8];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                k4_scales(hd[r][u], c, &d[r], &dmin[r], &sc1[r], &m1[r], &sc2[r], &m2[r]);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const u32 qa = q0[r][u] >> (8 * k), qb = q1[r][u] >> (8 * k);
                    const u32 ha = h0[r][u] >> (8 * k), hb = h1[r][u] >> (8 * k);
                    vlo[r][k] = u2f((qa & 15) | (((ha >> (2 * c)) & 1) << 4));
                    vlo[r][k + 4] = u2f((qb & 15) | (((hb >> (2 * c)) & 1) << 4));
                    vhi[r][k] = u2f(((qa >> 4) & 15) | (((ha >> (2 * c + 1)) & 1) << 4));
                    vhi[r][k + 4] = u2f(((qb >> 4) & 15) | (((hb >> (2 * c + 1)) & 1) << 4));
                }
            }
            const int e0 = ib * 256 + 64 * c + 8 * i;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const k4_x v = ld_k4_x(x + (u64)t * n + e0);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= rv) break;
                    const float* vl = vlo[r];
                    const float* vh = vhi[r];
                    const float lo = vl[0] * v.a0.x + vl[1] * v.a0.y + vl[2] * v.a0.z + vl[3] * v.a0.w +
                                     vl[4] * v.a1.x + vl[5] * v.a1.y + vl[6] * v.a1.z + vl[7] * v.a1.w;
                    const float hi = vh[0] * v.b0.x + vh[1] * v.b0.y + vh[2] * v.b0.z + vh[3] * v.b0.w +
                                     vh[4] * v.b1.x + vh[5] * v.b1.y + vh[6] * v.b1.z + vh[7] * v.b1.w;
                    acc[r][t] += d[r] * (sc1[r] * lo + sc2[r] * hi) - dmin[r] * (m1[r] * v.slo + m2[r] * v.shi);
                }
            }
        }
    }
}

// Q6_K: 210-byte super-blocks: ql[128], qh[64], scales[16] (int8), d (f16). Half a warp per
// super-block: lane l16 = 8h+j takes l in [4j, 4j+4) of half h, i.e. elements 128h + 32k + l for
// k = 0..3 (sub-block 8h + 2k + j/4). Blocks are only 2-byte aligned, so words are loaded as
// 16-bit pairs; the lane's four scales are byte j/4 of the 16-bit words at 192 + 8h + 2k.
template <int NT, int R>
__device__ __forceinline__ void lane_q6_k(const u8* w, u64 rb, int rv, int nb, const float* x, int n, int T,
                                          float (&acc)[R][NT]) {
    constexpr int U = MV_U / R;
    const int lane = threadIdx.x & 31;
    const int half = lane >> 4, l16 = lane & 15, h = l16 >> 3, j = l16 & 7, sb = 8 * (j >> 2);
    for (int ib0 = half; ib0 < nb; ib0 += 2 * U) {
        u32 la[R][U] = {}, lb[R][U] = {}, hh[R][U] = {}, sa[R][U] = {}, sbw[R][U] = {};
        u16 dh[R][U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (ib < nb && r < rv) {
                    const u8* b = w + r * rb + (u64)ib * 210;
                    const u8* ql = b + 64 * h + 4 * j;
                    la[r][u] = ld_u16x2(ql);
                    lb[r][u] = ld_u16x2(ql + 32);
                    hh[r][u] = ld_u16x2(b + 128 + 32 * h + 4 * j);
                    sa[r][u] = ld_u16x2(b + 192 + 8 * h);     // scale words k = 0, 1
                    sbw[r][u] = ld_u16x2(b + 192 + 8 * h + 4); // k = 2, 3
                    dh[r][u] = ld_u16(b + 208);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 2 * u;
            if (ib >= nb) break;
            float v[R][4][4], sc[R][4];
#pragma unroll
            for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int m = 0; m < 4; ++m) {
                    const u32 qa = byte_of(la[r][u], m), qb = byte_of(lb[r][u], m), q = byte_of(hh[r][u], m);
                    v[r][0][m] = u2f_off((qa & 15) | ((q & 3) << 4), 32.0f);
                    v[r][1][m] = u2f_off((qb & 15) | (((q >> 2) & 3) << 4), 32.0f);
                    v[r][2][m] = u2f_off((qa >> 4) | (((q >> 4) & 3) << 4), 32.0f);
                    v[r][3][m] = u2f_off((qb >> 4) | (((q >> 6) & 3) << 4), 32.0f);
                }
                // int8 scale + 128, minus 128
                sc[r][0] = u2f_off(((sa[r][u] >> sb) & 255) ^ 0x80, 128.0f);
                sc[r][1] = u2f_off(((sa[r][u] >> (16 + sb)) & 255) ^ 0x80, 128.0f);
                sc[r][2] = u2f_off(((sbw[r][u] >> sb) & 255) ^ 0x80, 128.0f);
                sc[r][3] = u2f_off(((sbw[r][u] >> (16 + sb)) & 255) ^ 0x80, 128.0f);
            }
            const int e0 = ib * 256 + 128 * h + 4 * j;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const float* xl = x + (u64)t * n + e0;
                float4 a[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) a[k] = ld_f4(xl + 32 * k);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= rv) break;
                    float sum = 0.0f;
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        sum += sc[r][k] * (v[r][k][0] * a[k].x + v[r][k][1] * a[k].y + v[r][k][2] * a[k].z +
                                           v[r][k][3] * a[k].w);
                    acc[r][t] += h2f(dh[r][u]) * sum;
                }
            }
        }
    }
}

// Q8_0: 34-byte blocks of 32: d (f16), qs[32] (int8). Four lanes per block, eight elements each.
template <int NT, int R>
__device__ __forceinline__ void lane_q8_0(const u8* w, u64 rb, int rv, int nb, const float* x, int n, int T,
                                          float (&acc)[R][NT]) {
    constexpr int U = MV_U / R;
    const int lane = threadIdx.x & 31;
    const int sub = lane >> 2, part = lane & 3;
    for (int ib0 = sub; ib0 < nb; ib0 += 8 * U) {
        u32 qa[R][U] = {}, qb[R][U] = {};
        u16 dh[R][U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 8 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (ib < nb && r < rv) {
                    const u8* b = w + r * rb + (u64)ib * 34;
                    dh[r][u] = ld_u16(b);
                    qa[r][u] = ld_u16x2(b + 2 + 8 * part);
                    qb[r][u] = ld_u16x2(b + 6 + 8 * part);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 8 * u;
            if (ib >= nb) break;
            float v[R][8], d[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                d[r] = h2f(dh[r][u]);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    v[r][k] = u2f_off(byte_of(qa[r][u], k) ^ 0x80, 128.0f); // int8 + 128, minus 128
                    v[r][k + 4] = u2f_off(byte_of(qb[r][u], k) ^ 0x80, 128.0f);
                }
            }
            const int e0 = ib * 32 + 8 * part;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const float* xl = x + (u64)t * n + e0;
                const float4 a0 = ld_f4(xl), a1 = ld_f4(xl + 4);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= rv) break;
                    const float* vr = v[r];
                    acc[r][t] += d[r] * (vr[0] * a0.x + vr[1] * a0.y + vr[2] * a0.z + vr[3] * a0.w +
                                         vr[4] * a1.x + vr[5] * a1.y + vr[6] * a1.z + vr[7] * a1.w);
                }
            }
        }
    }
}

// Q4_0: 18-byte blocks of 32: d (f16), qs[16]; element j < 16 is the low nibble of qs[j], element
// j+16 the high nibble, both offset by 8. Four lanes per block: lane part p takes qs[4p .. 4p+4).
template <int NT, int R>
__device__ __forceinline__ void lane_q4_0(const u8* w, u64 rb, int rv, int nb, const float* x, int n, int T,
                                          float (&acc)[R][NT]) {
    constexpr int U = MV_U / R;
    const int lane = threadIdx.x & 31;
    const int sub = lane >> 2, part = lane & 3;
    for (int ib0 = sub; ib0 < nb; ib0 += 8 * U) {
        u32 qw[R][U] = {};
        u16 dh[R][U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 8 * u;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (ib < nb && r < rv) {
                    const u8* b = w + r * rb + (u64)ib * 18;
                    dh[r][u] = ld_u16(b);
                    qw[r][u] = ld_u16x2(b + 2 + 4 * part);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ib = ib0 + 8 * u;
            if (ib >= nb) break;
            float lo[R][4], hi[R][4], d[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                d[r] = h2f(dh[r][u]);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const u32 q = byte_of(qw[r][u], k);
                    lo[r][k] = u2f_off(q & 15, 8.0f);
                    hi[r][k] = u2f_off(q >> 4, 8.0f);
                }
            }
            const int e0 = ib * 32 + 4 * part;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const float* xl = x + (u64)t * n + e0;
                const float4 a = ld_f4(xl), c = ld_f4(xl + 16);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= rv) break;
                    const float* l = lo[r];
                    const float* hh = hi[r];
                    acc[r][t] += d[r] * (l[0] * a.x + l[1] * a.y + l[2] * a.z + l[3] * a.w +
                                         hh[0] * c.x + hh[1] * c.y + hh[2] * c.z + hh[3] * c.w);
                }
            }
        }
    }
}

// 16-bit float rows (F16 when BF is 0, BF16 when 1). Rows of n elements; when n is a multiple of 2
// each lane reads element pairs (4-byte loads), otherwise single elements.
template <int NT, int BF>
__device__ __forceinline__ void lane_f16(const u8* w, int n, const float* x, int T, float* acc) {
    const int lane = threadIdx.x & 31;
    if ((n & 1) == 0) {
        for (int e = 2 * lane; e < n; e += 64) {
            const u32 p = ld_u32(w + 2 * (u64)e);
            const float w0 = BF ? bf2f((u16)(p & 0xffff)) : h2f((u16)(p & 0xffff));
            const float w1 = BF ? bf2f((u16)(p >> 16)) : h2f((u16)(p >> 16));
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t >= T) break;
                const float* xl = x + (u64)t * n + e;
                acc[t] += w0 * xl[0] + w1 * xl[1];
            }
        }
        return;
    }
    for (int e = lane; e < n; e += 32) {
        const u16 p = ld_u16(w + 2 * (u64)e);
        const float w0 = BF ? bf2f(p) : h2f(p);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= T) break;
            acc[t] += w0 * x[(u64)t * n + e];
        }
    }
}

template <int NT>
__device__ __forceinline__ void lane_f32(const u8* w, int n, const float* x, int T, float* acc) {
    const int lane = threadIdx.x & 31;
    const float* wf = (const float*)w;
    for (int e = lane; e < n; e += 32) {
        const float w0 = wf[e];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= T) break;
            acc[t] += w0 * x[(u64)t * n + e];
        }
    }
}

// Type ids as in GGUF (ggml_type).
#define TQ_F32 0
#define TQ_F16 1
#define TQ_Q4_0 2
#define TQ_Q8_0 8
#define TQ_Q4_K 12
#define TQ_Q5_K 13
#define TQ_Q6_K 14
#define TQ_BF16 30

// row_bytes is the size of one row of n elements of TYPE.
template <int TYPE>
__device__ __forceinline__ u64 row_bytes(int n) {
    switch (TYPE) {
    case TQ_Q4_K: return (u64)(n / 256) * 144;
    case TQ_Q5_K: return (u64)(n / 256) * 176;
    case TQ_Q6_K: return (u64)(n / 256) * 210;
    case TQ_Q8_0: return (u64)(n / 32) * 34;
    case TQ_Q4_0: return (u64)(n / 32) * 18;
    case TQ_F32: return (u64)n * 4;
    default: return (u64)n * 2;
    }
}

// mv_rows is the rows per warp of a kernel: MV_R for the single-row kernels of the quantized
// types, 1 for the batched ones (whose accumulators already fill the registers) and the float
// types (which stream at the copy bandwidth with one).
template <int TYPE, int NT>
__device__ __forceinline__ constexpr int mv_rows() {
    return NT == 1 && TYPE != TQ_F32 && TYPE != TQ_F16 && TYPE != TQ_BF16 ? MV_R : 1;
}

template <int TYPE, int NT>
__device__ __forceinline__ void matvec(const u8* TQ_RESTRICT w, const float* TQ_RESTRICT x, float* TQ_RESTRICT y,
                                       int n, int nrows, int T) {
    constexpr int R = mv_rows<TYPE, NT>();
    const int row = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (row >= nrows) return; // the whole warp leaves together; no block barrier follows
    const int rv = nrows - row < R ? nrows - row : R;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    const u64 rb = row_bytes<TYPE>(n);
    const u8* wr = w + (u64)row * rb;
    switch (TYPE) {
    case TQ_Q4_K: lane_q4_k<NT, R>(wr, rb, rv, n / 256, x, n, T, acc); break;
    case TQ_Q5_K: lane_q5_k<NT, R>(wr, rb, rv, n / 256, x, n, T, acc); break;
    case TQ_Q6_K: lane_q6_k<NT, R>(wr, rb, rv, n / 256, x, n, T, acc); break;
    case TQ_Q8_0: lane_q8_0<NT, R>(wr, rb, rv, n / 32, x, n, T, acc); break;
    case TQ_Q4_0: lane_q4_0<NT, R>(wr, rb, rv, n / 32, x, n, T, acc); break;
    case TQ_F16: lane_f16<NT, 0>(wr, n, x, T, acc[0]); break;
    case TQ_BF16: lane_f16<NT, 1>(wr, n, x, T, acc[0]); break;
    case TQ_F32: lane_f32<NT>(wr, n, x, T, acc[0]); break;
    }
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (r >= rv) break; // uniform for the warp
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= T) break;
            const float s = warp_sum(acc[r][t]);
            if (lane == 0) y[(u64)t * nrows + row + r] = s;
        }
    }
}

// matvec_ids: the routed experts of a batch in one launch. Pair p = blockIdx.y (token p/k, slot
// p mod k) multiplies expert sel[p] of the stacked matrices w (nexp matrices of nrows rows) by
// activation row p/k of x: y[p*nrows + row] = W[sel[p]] · x[p/k]. An expert index outside
// [0, nexp) (the router's -1 for non-finite logits) gives 0. Launch: grid = (ceil(nrows /
// (MV_WARPS·rows per warp)), npairs), block = 32*MV_WARPS.
template <int TYPE>
__device__ __forceinline__ void matvec_ids(const u8* TQ_RESTRICT w, const float* TQ_RESTRICT x, float* TQ_RESTRICT y,
                                           const int* sel, int n, int nrows, int nexp, int k, int npairs) {
    const int p = blockIdx.y;
    if (p >= npairs) return; // uniform for the block
    const int e = sel[p];
    float* yp = y + (u64)p * nrows;
    if (e < 0 || e >= nexp) {
        constexpr int R = mv_rows<TYPE, 1>();
        const int row = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
        if ((threadIdx.x & 31) == 0)
            for (int r = 0; r < R && row + r < nrows; ++r) yp[row + r] = 0.0f;
        return;
    }
    matvec<TYPE, 1>(w + (u64)e * nrows * row_bytes<TYPE>(n), x + (u64)(p / k) * n, yp, n, nrows, 1);
}

#define TQ_MV(name, TYPE)                                                                               \
    extern "C" __global__ void tq_mv_##name##_t1(const u8* w, const float* x, float* y, int n, int nrows, \
                                                 int T) {                                               \
        matvec<TYPE, 1>(w, x, y, n, nrows, 1);                                                          \
    }                                                                                                   \
    extern "C" __global__ void tq_mv_##name##_t8(const u8* w, const float* x, float* y, int n, int nrows, \
                                                 int T) {                                               \
        matvec<TYPE, MV_MAX_T>(w, x, y, n, nrows, T);                                                   \
    }                                                                                                   \
    extern "C" __global__ void tq_mv_##name##_ids(const u8* w, const float* x, float* y, const int* sel, int n, \
                                                  int nrows, int nexp, int k, int npairs) {             \
        matvec_ids<TYPE>(w, x, y, sel, n, nrows, nexp, k, npairs);                                      \
    }

TQ_MV(f32, TQ_F32)
TQ_MV(f16, TQ_F16)
TQ_MV(bf16, TQ_BF16)
TQ_MV(q4_0, TQ_Q4_0)
TQ_MV(q8_0, TQ_Q8_0)
TQ_MV(q4_k, TQ_Q4_K)
TQ_MV(q5_k, TQ_Q5_K)
TQ_MV(q6_k, TQ_Q6_K)
