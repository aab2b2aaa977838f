// tilex device helpers: tensor-core matmul on sm_80+ (cp.async rings, ldmatrix, mma.sync.m16n8k16).
__device__ __forceinline__ unsigned tilex_smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void tilex_cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(tilex_smem_u32(smem)), "l"(gmem) : "memory");
}

__device__ __forceinline__ void tilex_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void tilex_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Copy a ROWS x COLS tile at (r0, c0) of a row-major [nrows, ncols] tensor (row pitch `ld` elements)
// into shared memory rows of LDS elements. Elements outside the tensor become 0. Whole 16-byte chunks
// that are in bounds and aligned travel by cp.async; edge chunks element by element.
template <int ROWS, int COLS, int LDS, int THREADS, typename S>
__device__ __forceinline__ void tilex_tile_to_smem(S* smem, const S* __restrict__ g, long long r0, long long c0,
                                                   long long nrows, long long ncols, long long ld) {
  constexpr int CH = COLS / 8;
#pragma unroll
  for (int it = 0; it < (ROWS * CH + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + threadIdx.x;
    if ((ROWS * CH) % THREADS != 0 && i >= ROWS * CH) break;
    const int r = i / CH, c = (i % CH) * 8;
    const long long gr = r0 + r, gc = c0 + c;
    S* dst = smem + r * LDS + c;
    const bool row_ok = (unsigned long long)gr < (unsigned long long)nrows;
    if (row_ok && gc >= 0 && gc + 8 <= ncols && ((reinterpret_cast<unsigned long long>(g + gr * ld + gc) & 15ull) == 0)) {
      tilex_cp_async16(dst, g + gr * ld + gc);
    } else {
#pragma unroll 1  // an edge chunk: rare, and unrolled it costs registers in the loops that call this
      for (int v = 0; v < 8; ++v)
        dst[v] = (row_ok && (unsigned long long)(gc + v) < (unsigned long long)ncols) ? g[gr * ld + gc + v] : S{};
    }
  }
}

__device__ __forceinline__ void tilex_ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tilex_smem_u32(p)));
}

__device__ __forceinline__ void tilex_ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tilex_smem_u32(p)));
}

// two floats (already representable) as the low and high halves of a 32-bit register
template <typename S>
__device__ __forceinline__ unsigned tilex_pack2(float lo, float hi);

template <>
__device__ __forceinline__ unsigned tilex_pack2<tilex_bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

template <>
__device__ __forceinline__ unsigned tilex_pack2<tilex_f16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// d (4 f32: rows g and g+8, columns 2t and 2t+1) += a (16x16) * b (16x8)
template <typename S>
__device__ __forceinline__ void tilex_mma16816(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1);

template <>
__device__ __forceinline__ void tilex_mma16816<tilex_bf16>(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void tilex_mma16816<tilex_f16>(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
