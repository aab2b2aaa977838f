// tilex device helpers: gathered rows copied into shared memory by cp.async (needs tilex_mma.cuh).
// One 16-byte chunk of a gathered row into shared memory: cp.async when the chunk is whole and aligned
// (zero-filled, reading nothing, when `ok` is false), else element by element (zeros past `left`).
template <typename S>
__device__ __forceinline__ void tilex_gather_chunk16(S* dst, const S* __restrict__ g, long long off, bool ok, long long left) {
  const S* p = g + off;
  if (left >= 8 && (reinterpret_cast<unsigned long long>(p) & 15ull) == 0) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tilex_smem_u32(dst)), "l"(p), "r"(ok ? 16 : 0) : "memory");
  } else {
#pragma unroll 1
    for (int v = 0; v < 8; ++v) dst[v] = (ok && v < left) ? p[v] : S{};
  }
}
