// tilex device helpers: register tiles read back from a pipeline loop's shared-memory stage.
// VEC elements of a register tile from shared memory (one 16-byte read when VEC * sizeof(S) == 16;
// the caller guarantees the alignment: a chunk of a streamed stage starts a multiple of 8 elements in).
template <int VEC, typename S, typename R>
__device__ __forceinline__ void tilex_smem_chunk(R* dst, const S* p) {
  if (VEC * (int)sizeof(S) == 16) {
    tilex_unpack16<S, R>(dst, *reinterpret_cast<const uint4*>(p));
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) dst[v] = (R)tilex_io<S>::get(p[v]);
  }
}
