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
