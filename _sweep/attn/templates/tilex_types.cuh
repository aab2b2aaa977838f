// tilex device helpers: storage types and conversions (no CUDA headers needed).
struct __align__(2) tilex_bf16 { unsigned short bits; };
struct __align__(2) tilex_f16 { unsigned short bits; };

__device__ __forceinline__ float tilex_to_float(tilex_bf16 x) { return __uint_as_float(((unsigned int)x.bits) << 16); }
__device__ __forceinline__ float tilex_to_float(tilex_f16 x) { float f; asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(x.bits)); return f; }
__device__ __forceinline__ tilex_bf16 tilex_bf16_from(float f) { tilex_bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f)); return r; }
__device__ __forceinline__ tilex_f16 tilex_f16_from(float f) { tilex_f16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f)); return r; }
// round a float to the precision of a narrow float type (the value stays a float)
__device__ __forceinline__ float tilex_round_bf16(float f) { return tilex_to_float(tilex_bf16_from(f)); }
__device__ __forceinline__ float tilex_round_f16(float f) { return tilex_to_float(tilex_f16_from(f)); }

// storage <-> register conversions, by storage type
template <typename S> struct tilex_io;
template <> struct tilex_io<tilex_bf16> { __device__ static float get(tilex_bf16 x) { return tilex_to_float(x); } __device__ static tilex_bf16 put(float f) { return tilex_bf16_from(f); } };
template <> struct tilex_io<tilex_f16> { __device__ static float get(tilex_f16 x) { return tilex_to_float(x); } __device__ static tilex_f16 put(float f) { return tilex_f16_from(f); } };
template <> struct tilex_io<float> { __device__ static float get(float x) { return x; } __device__ static float put(float f) { return f; } };
template <> struct tilex_io<double> { __device__ static double get(double x) { return x; } __device__ static double put(double f) { return f; } };
template <> struct tilex_io<int> { __device__ static int get(int x) { return x; } __device__ static int put(int f) { return f; } };
template <> struct tilex_io<long long> { __device__ static long long get(long long x) { return x; } __device__ static long long put(long long f) { return f; } };
template <> struct tilex_io<bool> { __device__ static bool get(bool x) { return x; } __device__ static bool put(bool f) { return f; } };

// a 16-byte vector of 16 / sizeof(S) storage elements -> registers. bf16 -> f32 from each 32-bit word
// directly: the low element is word << 16, the high one word & 0xffff0000 (one instruction each, where
// going through 16-bit values costs a byte permute more for every high element)
template <typename S, typename R>
__device__ __forceinline__ void tilex_unpack16(R* dst, const uint4& q) {
  alignas(16) S tmp[16 / sizeof(S)];
  *reinterpret_cast<uint4*>(tmp) = q;
#pragma unroll
  for (int v = 0; v < (int)(16 / sizeof(S)); ++v) dst[v] = (R)tilex_io<S>::get(tmp[v]);
}
template <>
__device__ __forceinline__ void tilex_unpack16<tilex_bf16, float>(float* dst, const uint4& q) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    dst[2 * k] = __uint_as_float(w[k] << 16);
    dst[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
