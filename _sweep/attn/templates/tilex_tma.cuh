// tilex device helpers: streamed rings filled by TMA (sm_90a). One elected thread copies a box of an N-D tensor
// map (dims innermost first, as the host encoded it) into shared memory; the copy completes on an mbarrier with
// the box's bytes (out-of-bounds elements arrive as zeros and count too). Coordinates are int32, innermost first.
__device__ __forceinline__ void tilex_tma_box(void* dst, const tilex_tmap* map, int c0, int c1, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(tilex_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1),
                 "r"(tilex_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tilex_tma_box(void* dst, const tilex_tmap* map, int c0, int c1, int c2, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
               ::"r"(tilex_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2),
                 "r"(tilex_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tilex_tma_box(void* dst, const tilex_tmap* map, int c0, int c1, int c2, int c3,
                                              unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(tilex_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "r"(tilex_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tilex_tma_box(void* dst, const tilex_tmap* map, int c0, int c1, int c2, int c3, int c4,
                                              unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
               ::"r"(tilex_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                 "r"(c4), "r"(tilex_smem_addr(bar)) : "memory");
}
