// tilex device helpers: fp8 e4m3 and e5m2 storage (sm_89 and newer).
struct __align__(1) tilex_fp8e4m3 { unsigned char bits; };
__device__ __forceinline__ float tilex_to_float(tilex_fp8e4m3 x) {
  unsigned short h2; unsigned short in = x.bits;
  asm("{ .reg .b32 r; cvt.rn.f16x2.e4m3x2 r, %1; mov.b32 {%0, _}, r; }" : "=h"(h2) : "h"(in));
  tilex_f16 h; h.bits = h2; return tilex_to_float(h);
}
__device__ __forceinline__ tilex_fp8e4m3 tilex_fp8e4m3_from(float f) {
  unsigned short r; asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  tilex_fp8e4m3 o; o.bits = (unsigned char)(r & 0xff); return o;
}
__device__ __forceinline__ float tilex_round_fp8e4m3(float f) { return tilex_to_float(tilex_fp8e4m3_from(f)); }
template <> struct tilex_io<tilex_fp8e4m3> { __device__ static float get(tilex_fp8e4m3 x) { return tilex_to_float(x); } __device__ static tilex_fp8e4m3 put(float f) { return tilex_fp8e4m3_from(f); } };
struct __align__(1) tilex_fp8e5m2 { unsigned char bits; };
__device__ __forceinline__ float tilex_to_float(tilex_fp8e5m2 x) {
  unsigned short h2; unsigned short in = x.bits;
  asm("{ .reg .b32 r; cvt.rn.f16x2.e5m2x2 r, %1; mov.b32 {%0, _}, r; }" : "=h"(h2) : "h"(in));
  tilex_f16 h; h.bits = h2; return tilex_to_float(h);
}
__device__ __forceinline__ tilex_fp8e5m2 tilex_fp8e5m2_from(float f) {
  unsigned short r; asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  tilex_fp8e5m2 o; o.bits = (unsigned char)(r & 0xff); return o;
}
__device__ __forceinline__ float tilex_round_fp8e5m2(float f) { return tilex_to_float(tilex_fp8e5m2_from(f)); }
template <> struct tilex_io<tilex_fp8e5m2> { __device__ static float get(tilex_fp8e5m2 x) { return tilex_to_float(x); } __device__ static tilex_fp8e5m2 put(float f) { return tilex_fp8e5m2_from(f); } };
