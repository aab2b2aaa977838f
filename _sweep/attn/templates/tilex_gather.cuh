// tilex device helpers: gathered rows copied into shared memory by cp.async (needs tilex_mma.cuh).
// a * b + c by one 32 x 32 -> 64-bit multiply-add (IMAD.WIDE.U32: from C++ nvcc keeps a 64-bit multiply)
__device__ __forceinline__ unsigned long long tilex_mad_wide(unsigned a, unsigned b, unsigned long long c) {
  unsigned long long d;
  asm("mul.wide.u32 %0, %1, %2;" : "=l"(d) : "r"(a), "r"(b));
  return d + c;
}
// One 16-byte chunk (8 elements from column `col`) of a gathered row into shared memory. Element v is
// valid when `ok` (the row's indices are inside the tensor) and 0 <= col + v < ncols; invalid ones are 0.
// A whole, aligned chunk goes by cp.async (zero-filled, reading nothing, when !ok); an edge or unaligned
// chunk element by element.
template <typename S>
__device__ __forceinline__ void tilex_gather_chunk16(S* dst, const S* __restrict__ g, long long off, bool ok,
                                                     long long col, long long ncols) {
  const S* p = g + off;
  if (col >= 0 && col + 8 <= ncols && (reinterpret_cast<unsigned long long>(p) & 15ull) == 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tilex_smem_u32(dst)), "l"(p), "r"(ok ? 16 : 0) : "memory");
  } else {
#pragma unroll 1
    for (int v = 0; v < 8; ++v) dst[v] = (ok && (unsigned long long)(col + v) < (unsigned long long)ncols) ? p[v] : S{};
  }
}
