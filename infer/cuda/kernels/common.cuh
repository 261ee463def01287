// common.cuh: types and helpers shared by the tq CUDA kernels.
//
// The kernel sources include no header but this one: no libc, no cuda_fp16.h, so that they compile
// with `nvcc --ptx`, with NVRTC, and (with TQ_EMU defined) as plain C++ for the CPU emulator the Go
// tests use (infer/cuda/testdata/cuemu). Everything architecture specific goes through the few
// helpers below, which the emulator re-implements.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define TQ_FULL_MASK 0xffffffffu

#ifndef TQ_EMU
#define TQ_RESTRICT __restrict__

// h2f converts IEEE binary16 bits to float (exact).
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// f2h converts a float to binary16 bits, round to nearest even.
__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// bf2f converts bfloat16 bits to float (exact).
__device__ __forceinline__ float bf2f(u16 h) { return __uint_as_float(((u32)h) << 16); }

// bits_f reinterprets 32 bits as a float.
__device__ __forceinline__ float bits_f(u32 u) { return __uint_as_float(u); }

// Alignment-checked loads. On the device they are plain loads; the emulator checks that the address
// has the alignment the device would require.
__device__ __forceinline__ u16 ld_u16(const u8* p) { return *(const u16*)p; }
__device__ __forceinline__ u32 ld_u32(const u8* p) { return *(const u32*)p; }
__device__ __forceinline__ float4 ld_f4(const float* p) { return *(const float4*)p; }

__device__ __forceinline__ float shfl_xor_f(float v, int m) { return __shfl_xor_sync(TQ_FULL_MASK, v, m); }
__device__ __forceinline__ int shfl_xor_i(int v, int m) { return __shfl_xor_sync(TQ_FULL_MASK, v, m); }
#else
#include "cuemu.h"
#endif

// u2f_off returns (float)v - off, exactly, for integers 0 <= v < 2^23 and off (a small integer)
// without an integer-to-float conversion: v is placed in the mantissa of 2^23 and 2^23 + off is
// subtracted (one logic operation and one float add). The quantized mat-vecs convert every
// weight, and I2F issues at a quarter of the rate of float adds on sm_90 (16 per clock per SM),
// which made it their bottleneck.
__device__ __forceinline__ float u2f_off(u32 v, float off) { return bits_f(0x4B000000u | v) - (8388608.0f + off); }
__device__ __forceinline__ float u2f(u32 v) { return u2f_off(v, 0.0f); }

// warp_sum returns the sum of v over the 32 lanes of the warp (every lane gets it).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += shfl_xor_f(v, o);
    return v;
}

// warp_max returns the maximum of v over the warp.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, shfl_xor_f(v, o));
    return v;
}

// block_sum returns the sum of v over the block (every thread gets it). blockDim.x must be a
// multiple of 32 and at most 1024; sh is 32 floats of shared memory. All threads must call it.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // sh may still be read by a previous reduction
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

// block_max is block_sum for the maximum.
__device__ __forceinline__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -3.402823466e38f;
    return warp_max(v);
}

// better reports whether (v, i) ranks before (bv, bi) in a descending order with ties broken
// towards the lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// block_argmax returns, in every thread, the index of the largest v over the block (ties: lowest
// index; idx < 0 marks "no candidate"). shv/shi are 32 floats/ints of shared memory.
__device__ __forceinline__ int block_argmax(float v, int idx, float* shv, int* shi) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = shfl_xor_f(v, o);
        int oi = shfl_xor_i(idx, o);
        if (oi >= 0 && (idx < 0 || better(ov, oi, v, idx))) {
            v = ov;
            idx = oi;
        }
    }
    __syncthreads();
    if (lane == 0) {
        shv[w] = v;
        shi[w] = idx;
    }
    __syncthreads();
    v = lane < nw ? shv[lane] : 0.0f;
    idx = lane < nw ? shi[lane] : -1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = shfl_xor_f(v, o);
        int oi = shfl_xor_i(idx, o);
        if (oi >= 0 && (idx < 0 || better(ov, oi, v, idx))) {
            v = ov;
            idx = oi;
        }
    }
    return idx;
}
