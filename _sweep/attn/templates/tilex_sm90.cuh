// tilex device helpers: sm_90a tensor-core matmul (TMA into swizzled shared memory, mbarriers, wgmma).
#ifndef TILEX_TMAP_DEFINED
#define TILEX_TMAP_DEFINED
struct alignas(64) tilex_tmap { unsigned long long words[16]; };  // a CUtensorMap, encoded on the host
#endif

__device__ __forceinline__ unsigned tilex_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void tilex_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tilex_smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void tilex_mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void tilex_mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tilex_smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void tilex_mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tilex_smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void tilex_mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(tilex_smem_addr(bar)), "r"(parity) : "memory");
  } while (!done);
}

// TMA: copy the box at (c0 = inner, c1 = outer) of a 2-D tensor map into shared memory; completes on `bar`.
__device__ __forceinline__ void tilex_tma_load_2d(void* dst, const tilex_tmap* map, int c0, int c1, unsigned long long* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(tilex_smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1),
                 "r"(tilex_smem_addr(bar)) : "memory");
}

// A wgmma shared-memory descriptor for a 128-byte-swizzled operand (start, leading and stride byte offsets).
__device__ __forceinline__ unsigned long long tilex_wgmma_desc(const void* p, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((tilex_smem_addr(p) & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16)
       | ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tilex_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tilex_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tilex_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

template <int R>
__device__ __forceinline__ void tilex_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void tilex_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }

// Generic-proxy writes (st.shared, cp.async) to shared memory that wgmma then reads (the async proxy):
// each writing thread fences after its writes, before the barrier that precedes the wgmma.
__device__ __forceinline__ void tilex_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
