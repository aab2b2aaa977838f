// tilex device helpers: atomic read-modify-writes of one global element, relaxed, at device (gpu) scope.
// One overload per storage type; the value is the register type (float for f16/bf16, rounded here).
// Nothing is ordered around them: an atomic is not a fence, and other reads and writes of the kernel may be
// seen before or after it by other blocks; the results are complete when the kernel ends.

// ---- add (ints wrap: the unsigned instruction is the same)
__device__ __forceinline__ void tilex_atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void tilex_atomic_add(long long* p, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ void tilex_atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void tilex_atomic_add(tilex_f16* p, float v) {
  asm volatile("red.relaxed.gpu.global.add.noftz.f16 [%0], %1;" :: "l"(p), "h"(tilex_f16_from(v).bits) : "memory");
}
__device__ __forceinline__ void tilex_atomic_add(tilex_bf16* p, float v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.noftz.bf16 [%0], %1;" :: "l"(p), "h"(tilex_bf16_from(v).bits) : "memory");
#else
  // before sm_90 there is no bf16 atomic: a compare-and-swap loop on the 32-bit word holding the element
  unsigned int* w = reinterpret_cast<unsigned int*>(reinterpret_cast<unsigned long long>(p) & ~3ull);
  const unsigned int shift = (reinterpret_cast<unsigned long long>(p) & 2ull) ? 16u : 0u;
  const float add = tilex_to_float(tilex_bf16_from(v));
  unsigned int old = *w, assumed;
  do {
    assumed = old;
    tilex_bf16 cur;
    cur.bits = (unsigned short)(assumed >> shift);
    const unsigned int sum = tilex_bf16_from(tilex_to_float(cur) + add).bits;
    old = atomicCAS(w, assumed, (assumed & ~(0xffffu << shift)) | (sum << shift));
  } while (old != assumed);
#endif
}
// two contiguous 2-byte elements whose first is 4-byte aligned, in one packed instruction (f16x2, bf16x2 on sm_90)
__device__ __forceinline__ void tilex_atomic_add2(tilex_f16* p, float a, float b) {
  const unsigned int v = (unsigned int)tilex_f16_from(a).bits | ((unsigned int)tilex_f16_from(b).bits << 16);
  asm volatile("red.relaxed.gpu.global.add.noftz.f16x2 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void tilex_atomic_add2(tilex_bf16* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
  const unsigned int v = (unsigned int)tilex_bf16_from(a).bits | ((unsigned int)tilex_bf16_from(b).bits << 16);
  asm volatile("red.relaxed.gpu.global.add.noftz.bf16x2 [%0], %1;" :: "l"(p), "r"(v) : "memory");
#else
  tilex_atomic_add(p, a);
  tilex_atomic_add(p + 1, b);
#endif
}
// elements v = 0, 1 of a pair (column-contiguous slots) with [first, last) inside the tensor: both in one
// packed add when both are inside and the pair is 4-byte aligned, else each alone
template <typename S>
__device__ __forceinline__ void tilex_atomic_add_pair(S* p, long long first, long long last, float a, float b) {
  const bool in0 = first <= 0 && last > 0, in1 = first <= 1 && last > 1;
  if (in0 && in1 && (reinterpret_cast<unsigned long long>(p) & 3ull) == 0) {
    tilex_atomic_add2(p, a, b);
  } else {
    if (in0) tilex_atomic_add(p, a);
    if (in1) tilex_atomic_add(p + 1, b);
  }
}

// ---- max / min. Floats: a NaN value is skipped; a value with sign 0 orders as its int bits (atomicMax on
// int), one with sign 1 as its unsigned bits reversed (atomicMin on unsigned): the float order, -0.0 < +0.0.
__device__ __forceinline__ void tilex_atomic_max(int* p, int v) { atomicMax(p, v); }
__device__ __forceinline__ void tilex_atomic_max(long long* p, long long v) { atomicMax(p, v); }
__device__ __forceinline__ void tilex_atomic_max(float* p, float v) {
  if (v != v) return;
  if (__float_as_int(v) >= 0) atomicMax(reinterpret_cast<int*>(p), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned int*>(p), __float_as_uint(v));
}
__device__ __forceinline__ void tilex_atomic_min(int* p, int v) { atomicMin(p, v); }
__device__ __forceinline__ void tilex_atomic_min(long long* p, long long v) { atomicMin(p, v); }
__device__ __forceinline__ void tilex_atomic_min(float* p, float v) {
  if (v != v) return;
  if (__float_as_int(v) >= 0) atomicMin(reinterpret_cast<int*>(p), __float_as_int(v));
  else atomicMax(reinterpret_cast<unsigned int*>(p), __float_as_uint(v));
}

// ---- exchange: the element takes the value (of colliding writes, one lands last)
__device__ __forceinline__ void tilex_atomic_xchg(int* p, int v) { atomicExch(p, v); }
__device__ __forceinline__ void tilex_atomic_xchg(long long* p, long long v) {
  atomicExch(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ void tilex_atomic_xchg(float* p, float v) { atomicExch(p, v); }

// ---- compare-and-swap: the element takes v if it equals `expected` (floats compare their bits)
__device__ __forceinline__ void tilex_atomic_cas(int* p, int expected, int v) { atomicCAS(p, expected, v); }
__device__ __forceinline__ void tilex_atomic_cas(long long* p, long long expected, long long v) {
  atomicCAS(reinterpret_cast<unsigned long long*>(p), (unsigned long long)expected, (unsigned long long)v);
}
__device__ __forceinline__ void tilex_atomic_cas(float* p, float expected, float v) {
  atomicCAS(reinterpret_cast<int*>(p), __float_as_int(expected), __float_as_int(v));
}
