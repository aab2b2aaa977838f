// tilex device helpers: math and integer semantics shared with the NumPy interpreter.
// 2**x as one MUFU.EX2: ex2.approx (2 ulp, as exp2f) with subnormal results flushed to 0 (exp2f's
// non-ftz form costs a range test and two multiplies around the MUFU to produce them)
__device__ __forceinline__ float tilex_exp2(float x) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
// sigmoid and silu as MUFU.EX2 and MUFU.RCP (ex2.approx.ftz, rcp.approx.ftz: a few ulp, results below 2^-126
// flush to 0) where expf and an IEEE division take ~20 instructions and a slow-path branch per element
__device__ __forceinline__ float tilex_rcp_approx(float x) { float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
__device__ __forceinline__ float tilex_sigmoid(float x) { return tilex_rcp_approx(1.0f + tilex_exp2(-1.4426950408889634f * x)); }
__device__ __forceinline__ float tilex_silu(float x) { return x * tilex_sigmoid(x); }
__device__ __forceinline__ float tilex_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
// gelu_tanh as x * sigmoid(2u): 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) exactly, so one MUFU.EX2 and one MUFU.RCP
// where tanhf costs ~15 instructions; no cancellation in 1 + tanh(u) for very negative x either
__device__ __forceinline__ float tilex_gelu_tanh(float x) { return x * tilex_sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x)); }
// i32/i64 + - * and negation wrap around (two's complement), as the language defines:
// computed in the unsigned type, so overflow is never undefined behaviour in C++
template <typename T> struct tilex_unsigned;
template <> struct tilex_unsigned<int> { typedef unsigned int type; };
template <> struct tilex_unsigned<long long> { typedef unsigned long long type; };
template <typename T> __device__ __forceinline__ T tilex_wadd(T a, T b) { typedef typename tilex_unsigned<T>::type U; return (T)((U)a + (U)b); }
template <typename T> __device__ __forceinline__ T tilex_wsub(T a, T b) { typedef typename tilex_unsigned<T>::type U; return (T)((U)a - (U)b); }
template <typename T> __device__ __forceinline__ T tilex_wmul(T a, T b) { typedef typename tilex_unsigned<T>::type U; return (T)((U)a * (U)b); }
template <typename T> __device__ __forceinline__ T tilex_wneg(T a) { typedef typename tilex_unsigned<T>::type U; return (T)(U(0) - (U)a); }
// floor division and modulo (Python semantics), as the language defines // and %; b == -1 wraps (INT_MIN // -1)
template <typename T> __device__ __forceinline__ T tilex_floordiv(T a, T b) { if (b == -1) return tilex_wneg<T>(a); T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <typename T> __device__ __forceinline__ T tilex_floormod(T a, T b) { if (b == -1) return 0; T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ float tilex_floormod(float a, float b) { return a - floorf(a / b) * b; }
template <typename T> __device__ __forceinline__ T tilex_cdiv(T a, T b) { if (b == -1) return tilex_wneg<T>(a); T q = a / b, r = a % b; return (r != 0 && ((r > 0) == (b > 0))) ? q + 1 : q; }  // ceil(a / b), no overflow
template <typename T> __device__ __forceinline__ T tilex_imax(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T tilex_imin(T a, T b) { return a < b ? a : b; }
// float -> int truncation toward zero; NaN gives 0 and out-of-range saturates (PTX cvt.rzi semantics)
__device__ __forceinline__ int tilex_f2i(float x) { return __float2int_rz(x); }
__device__ __forceinline__ long long tilex_f2ll(float x) { return __float2ll_rz(x); }
