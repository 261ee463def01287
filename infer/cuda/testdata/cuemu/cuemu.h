// cuemu.h: the CUDA device vocabulary for compiling the tq kernels as host C++ (TQ_EMU).
//
// Used only by the Go tests: they build the kernels together with cuemu.cpp into a fake
// libcuda.so.1 that runs every launch on the CPU. Each CUDA thread is a coroutine; a block runs its
// threads until each reaches a barrier (__syncthreads, or the warp-level exchange behind a shuffle),
// then releases the barrier. Barrier misuse (divergent __syncthreads, shuffles with missing lanes)
// and misaligned loads are reported as launch errors instead of being silently tolerated.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

struct tq_dim3 {
    unsigned x, y, z;
};

struct float4 {
    float x, y, z, w;
};

struct tq_emu_thread;
tq_emu_thread* tq_emu_cur();
const tq_dim3& tq_emu_tid();
extern tq_dim3 tq_emu_block_idx, tq_emu_block_dim, tq_emu_grid_dim;
void tq_emu_syncthreads();
uint32_t tq_emu_shfl_xor(uint32_t v, int mask);
void tq_emu_fail(const char* what, const void* p);

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define TQ_RESTRICT __restrict__
#define threadIdx (tq_emu_tid())
#define blockIdx tq_emu_block_idx
#define blockDim tq_emu_block_dim
#define gridDim tq_emu_grid_dim
#define __syncthreads() tq_emu_syncthreads()

inline float shfl_xor_f(float v, int m) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    b = tq_emu_shfl_xor(b, m);
    std::memcpy(&v, &b, 4);
    return v;
}
inline int shfl_xor_i(int v, int m) { return (int)tq_emu_shfl_xor((uint32_t)v, m); }

// Bit-exact IEEE binary16 conversions (what cvt.f32.f16 and cvt.rn.f16.f32 compute).
inline float h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t f2h(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    const uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
    const uint32_t abs = b & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00;
    if (abs >= 0x477ff000u) return sign | 0x7c00;
    if (abs < 0x38800000u) {
        float v;
        std::memcpy(&v, &abs, 4);
        return sign | (uint16_t)std::nearbyint((double)v * 16777216.0);
    }
    const uint32_t e = (abs >> 23) - 112, m = abs & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    const uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

inline float bf2f(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
inline float bits_f(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t ld_u16(const uint8_t* p) {
    if ((uintptr_t)p % 2) tq_emu_fail("misaligned 2-byte load", p);
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
inline uint32_t ld_u32(const uint8_t* p) {
    if ((uintptr_t)p % 4) tq_emu_fail("misaligned 4-byte load", p);
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline float4 ld_f4(const float* p) {
    if ((uintptr_t)p % 16) tq_emu_fail("misaligned 16-byte load", p);
    float4 v;
    std::memcpy(&v, p, 16);
    return v;
}
