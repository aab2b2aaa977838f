// tilex device helpers: reductions (combine ops and warp shuffles).
__device__ __forceinline__ float tilex_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ int tilex_shfl_xor(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ long long tilex_shfl_xor(long long v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ double tilex_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ bool tilex_shfl_xor(bool v, int m) { return __shfl_xor_sync(0xffffffffu, (int)v, m) != 0; }
// (value, index) pairs for argmax/argmin: the larger (smaller) value wins, ties go to the lower index, NaN never wins
template <typename T>
__device__ __forceinline__ void tilex_argmax_combine(T& v, int& i, T v2, int i2) { if (v2 > v || (v2 == v && i2 < i) || (v != v && v2 == v2)) { v = v2; i = i2; } }
template <typename T>
__device__ __forceinline__ void tilex_argmin_combine(T& v, int& i, T v2, int i2) { if (v2 < v || (v2 == v && i2 < i) || (v != v && v2 == v2)) { v = v2; i = i2; } }
