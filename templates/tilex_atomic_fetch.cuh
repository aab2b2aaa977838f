// tilex device helpers: atomics that return the element's old value (`old = atomic_add(t[...], v)`), relaxed, at
// device (gpu) scope, one per storage type as tilex_atomic.cuh's; the value and the old are the register type
// (float for f16/bf16). Each returns the value the element held just before this update took effect: the olds of
// colliding updates are those of some serial order of them. Not fences (see tilex_atomic.cuh).

// ---- add (ints wrap)
__device__ __forceinline__ int tilex_atomic_fetch_add(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ long long tilex_atomic_fetch_add(long long* p, long long v) {
  return (long long)atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ float tilex_atomic_fetch_add(float* p, float v) { return atomicAdd(p, v); }
__device__ __forceinline__ float tilex_atomic_fetch_add(tilex_f16* p, float v) {
  tilex_f16 old;
  asm volatile("atom.relaxed.gpu.global.add.noftz.f16 %0, [%1], %2;"
               : "=h"(old.bits) : "l"(p), "h"(tilex_f16_from(v).bits) : "memory");
  return tilex_to_float(old);
}
__device__ __forceinline__ float tilex_atomic_fetch_add(tilex_bf16* p, float v) {
  tilex_bf16 old;
#if __CUDA_ARCH__ >= 900
  asm volatile("atom.relaxed.gpu.global.add.noftz.bf16 %0, [%1], %2;"
               : "=h"(old.bits) : "l"(p), "h"(tilex_bf16_from(v).bits) : "memory");
#else
  // before sm_90 there is no bf16 atomic: a compare-and-swap loop on the 32-bit word holding the element
  unsigned int* w = reinterpret_cast<unsigned int*>(reinterpret_cast<unsigned long long>(p) & ~3ull);
  const unsigned int shift = (reinterpret_cast<unsigned long long>(p) & 2ull) ? 16u : 0u;
  const float add = tilex_to_float(tilex_bf16_from(v));
  unsigned int word = *w, assumed;
  do {
    assumed = word;
    old.bits = (unsigned short)(assumed >> shift);
    const unsigned int sum = tilex_bf16_from(tilex_to_float(old) + add).bits;
    word = atomicCAS(w, assumed, (assumed & ~(0xffffu << shift)) | (sum << shift));
  } while (word != assumed);
#endif
  return tilex_to_float(old);
}
// two contiguous 2-byte elements whose first is 4-byte aligned, in one packed instruction (f16x2; bf16x2 on
// sm_90): both olds come back in one 32-bit word
__device__ __forceinline__ void tilex_atomic_fetch_add2(tilex_f16* p, float a, float b, float& oa, float& ob) {
  const unsigned int v = (unsigned int)tilex_f16_from(a).bits | ((unsigned int)tilex_f16_from(b).bits << 16);
  unsigned int old;
  asm volatile("atom.relaxed.gpu.global.add.noftz.f16x2 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  tilex_f16 lo, hi;
  lo.bits = (unsigned short)(old & 0xffffu);
  hi.bits = (unsigned short)(old >> 16);
  oa = tilex_to_float(lo);
  ob = tilex_to_float(hi);
}
__device__ __forceinline__ void tilex_atomic_fetch_add2(tilex_bf16* p, float a, float b, float& oa, float& ob) {
#if __CUDA_ARCH__ >= 900
  const unsigned int v = (unsigned int)tilex_bf16_from(a).bits | ((unsigned int)tilex_bf16_from(b).bits << 16);
  unsigned int old;
  asm volatile("atom.relaxed.gpu.global.add.noftz.bf16x2 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  tilex_bf16 lo, hi;
  lo.bits = (unsigned short)(old & 0xffffu);
  hi.bits = (unsigned short)(old >> 16);
  oa = tilex_to_float(lo);
  ob = tilex_to_float(hi);
#else
  oa = tilex_atomic_fetch_add(p, a);
  ob = tilex_atomic_fetch_add(p + 1, b);
#endif
}
// elements v = 0, 1 of a pair (column-contiguous slots) with [first, last) inside the tensor, updated when `run`:
// both in one packed add when both are inside and the pair is 4-byte aligned, else each alone; an element not
// updated gets `other` as its old value
template <typename S>
__device__ __forceinline__ void tilex_atomic_fetch_add_pair(S* p, bool run, long long first, long long last, float a,
                                                            float b, float other, float& oa, float& ob) {
  const bool in0 = run && first <= 0 && last > 0, in1 = run && first <= 1 && last > 1;
  oa = other;
  ob = other;
  if (in0 && in1 && (reinterpret_cast<unsigned long long>(p) & 3ull) == 0) {
    tilex_atomic_fetch_add2(p, a, b, oa, ob);
  } else {
    if (in0) oa = tilex_atomic_fetch_add(p, a);
    if (in1) ob = tilex_atomic_fetch_add(p + 1, b);
  }
}

// ---- max / min. Floats as tilex_atomic.cuh's: a NaN value is skipped (its old is the element as read now), a value
// with sign 0 orders as its int bits, one with sign 1 as its unsigned bits reversed
__device__ __forceinline__ int tilex_atomic_fetch_max(int* p, int v) { return atomicMax(p, v); }
__device__ __forceinline__ long long tilex_atomic_fetch_max(long long* p, long long v) { return atomicMax(p, v); }
__device__ __forceinline__ float tilex_atomic_fetch_max(float* p, float v) {
  if (v != v) return *reinterpret_cast<volatile float*>(p);
  if (__float_as_int(v) >= 0) return __int_as_float(atomicMax(reinterpret_cast<int*>(p), __float_as_int(v)));
  return __uint_as_float(atomicMin(reinterpret_cast<unsigned int*>(p), __float_as_uint(v)));
}
__device__ __forceinline__ int tilex_atomic_fetch_min(int* p, int v) { return atomicMin(p, v); }
__device__ __forceinline__ long long tilex_atomic_fetch_min(long long* p, long long v) { return atomicMin(p, v); }
__device__ __forceinline__ float tilex_atomic_fetch_min(float* p, float v) {
  if (v != v) return *reinterpret_cast<volatile float*>(p);
  if (__float_as_int(v) >= 0) return __int_as_float(atomicMin(reinterpret_cast<int*>(p), __float_as_int(v)));
  return __uint_as_float(atomicMax(reinterpret_cast<unsigned int*>(p), __float_as_uint(v)));
}

// ---- exchange: the element takes the value; the old is what it replaced
__device__ __forceinline__ int tilex_atomic_fetch_xchg(int* p, int v) { return atomicExch(p, v); }
__device__ __forceinline__ long long tilex_atomic_fetch_xchg(long long* p, long long v) {
  return (long long)atomicExch(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}
__device__ __forceinline__ float tilex_atomic_fetch_xchg(float* p, float v) { return atomicExch(p, v); }

// ---- compare-and-swap: the element takes v if it equals `expected` (floats compare their bits); the old tells
// whether it did (old == expected, bit for bit)
__device__ __forceinline__ int tilex_atomic_fetch_cas(int* p, int expected, int v) { return atomicCAS(p, expected, v); }
__device__ __forceinline__ long long tilex_atomic_fetch_cas(long long* p, long long expected, long long v) {
  return (long long)atomicCAS(reinterpret_cast<unsigned long long*>(p), (unsigned long long)expected,
                              (unsigned long long)v);
}
__device__ __forceinline__ float tilex_atomic_fetch_cas(float* p, float expected, float v) {
  return __int_as_float(atomicCAS(reinterpret_cast<int*>(p), __float_as_int(expected), __float_as_int(v)));
}
