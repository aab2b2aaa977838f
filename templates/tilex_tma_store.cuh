// tilex device helpers: epilogue stores by TMA (sm_90a; a persistent tile loop's, passes/plan_tma_store.py). The
// consumers write the tile into a 128-byte swizzled staging buffer with stmatrix and fence it for the async proxy;
// one thread of each warpgroup stores its rows with cp.async.bulk.tensor (bulk groups). Before the buffer is
// written again that thread waits for the previous stores to have read it, and before it exits for them to be done.
// stmatrix .x4: four 8x8 matrices of 2-byte elements; lane l gives the address of row l % 8 of matrix l / 8 and
// holds, in r[q], its pair of row l / 4 (columns 2 (l % 4), +1) of matrix q: the mma fragment's.
__device__ __forceinline__ void tilex_stmatrix_x4(void* p, unsigned r0, unsigned r1, unsigned r2, unsigned r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(tilex_smem_addr(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
// store the box at (c0 = inner, c1 = outer) of a 2-D tensor map from shared memory (what lies outside the
// tensor is not written); part of this thread's current bulk group
__device__ __forceinline__ void tilex_tma_store_2d(const tilex_tmap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(tilex_smem_addr(src)) : "memory");
}
__device__ __forceinline__ void tilex_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// all but N of this thread's bulk groups have read their shared memory
template <int N>
__device__ __forceinline__ void tilex_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
// all but N of this thread's bulk groups are done (their global writes performed)
template <int N>
__device__ __forceinline__ void tilex_bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }
// named barrier `id` (a register: one per warpgroup) of `threads` threads
__device__ __forceinline__ void tilex_bar_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
