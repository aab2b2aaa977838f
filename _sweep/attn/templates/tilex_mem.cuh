// tilex device helpers: masked, vectorized global loads and stores.
// Elements [first, last) of a VEC-element chunk are inside the tensor; the rest are skipped (loads give `other`).
// Whole, 16-byte aligned chunks move as 16-byte vectors; edge chunks element by element.
// NC: whole chunks by the read-only (non-coherent) path, __ldg; only for a tensor the kernel does not write
// (PTX allows ld.global.nc only for data read-only for the kernel's lifetime: a tensor it writes is read coherently)
template <int VEC, typename S, typename R, bool NC = true>
__device__ __forceinline__ void tilex_load_chunk(R* dst, const S* __restrict__ base, long long off, long long first, long long last, bool ok, R other) {
  const S* p = base + off;
  constexpr int BYTES = VEC * (int)sizeof(S);
  if constexpr (BYTES % 16 == 0) {
    // Both paths fill the chunk's raw bits and one unpack follows them: the 16-byte load is a predicated
    // instruction ahead of a rarely taken branch, not the body of a branch that also converts. The next
    // chunk's (or the next tensor's) load then shares a basic block with this unpack and ptxas issues it
    // first, so a thread's loads are in flight together instead of one round trip each.
    uint4 raw[BYTES / 16];
    const bool whole = ok && first <= 0 && last >= VEC && (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
    if (whole) {
#pragma unroll
      for (int q = 0; q < BYTES / 16; ++q) raw[q] = NC ? __ldg(reinterpret_cast<const uint4*>(p) + q) : reinterpret_cast<const uint4*>(p)[q];
    } else {
      alignas(16) S tmp[VEC];  // `other` is of the tensor's dtype (codegen casts it; narrow scalar parameters are rounded on entry): put() is exact
#pragma unroll
      for (int v = 0; v < VEC; ++v) tmp[v] = (ok && v >= first && v < last) ? p[v] : tilex_io<S>::put(other);
#pragma unroll
      for (int q = 0; q < BYTES / 16; ++q) raw[q] = reinterpret_cast<const uint4*>(tmp)[q];
    }
#pragma unroll
    for (int q = 0; q < BYTES / 16; ++q) tilex_unpack16<S, R>(dst + q * (16 / (int)sizeof(S)), raw[q]);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) dst[v] = (ok && v >= first && v < last) ? (R)tilex_io<S>::get(p[v]) : other;
  }
}

template <int VEC, typename S, typename R>
__device__ __forceinline__ void tilex_store_chunk(S* __restrict__ base, long long off, long long first, long long last, bool ok, const R* src) {
  S* p = base + off;
  constexpr int BYTES = VEC * (int)sizeof(S);
  if (BYTES % 16 == 0 && ok && first <= 0 && last >= VEC && (reinterpret_cast<unsigned long long>(p) & 15ull) == 0) {
    alignas(16) S tmp[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) tmp[v] = tilex_io<S>::put(src[v]);
#pragma unroll
    for (int q = 0; q < BYTES / 16; ++q) reinterpret_cast<uint4*>(p)[q] = reinterpret_cast<const uint4*>(tmp)[q];
  } else if (ok) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) if (v >= first && v < last) p[v] = tilex_io<S>::put(src[v]);
  }
}
