// tilex device helpers: tensor-core matmul on sm_80+ (cp.async rings, ldmatrix, mma.sync.m16n8k16).
__device__ __forceinline__ unsigned tilex_smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void tilex_cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(tilex_smem_u32(smem)), "l"(gmem) : "memory");
}

// 16 bytes by cp.async when `ok`, else 16 zero bytes written by the copy (ignore-src: nothing is read; the
// streamed row copies and the gathered rows of tilex_gather.cuh)
__device__ __forceinline__ void tilex_cp_async16_or_zero(void* smem, const void* gmem, bool ok) {
  asm volatile("{\n .reg .pred p;\n setp.eq.u32 p, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, p;\n}\n"
               ::"r"(tilex_smem_u32(smem)), "l"(gmem), "r"((unsigned)ok) : "memory");
}

__device__ __forceinline__ void tilex_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void tilex_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Element offset of (r, c) in a [ROWS, COLS] tile of 2-byte elements stored as COLS / 64 atoms of [ROWS, 64]
// with 128-byte swizzle (16-byte chunk j of row r at chunk j ^ (r % 8)): the layout TMA's SWIZZLE_128B writes
// and an sm_90a tensor-core shared-memory descriptor of layout type 1 reads (the tile starts 1024-byte aligned).
template <int ROWS>
__device__ __forceinline__ int tilex_sw128(int r, int c) {
  return (c >> 6) * (ROWS * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

// Copy a ROWS x COLS tile at (r0, c0) of a row-major [nrows, ncols] tensor (row pitch `ld` elements)
// into shared memory: rows of LDS elements, or with SWIZZLE 128-byte swizzled rows of 2-byte elements
// (tilex_sw128, COLS % 64 == 0: sm_90a tensor-core operands). Elements outside the tensor become 0.
// Fast path (padded rows only; a thread copying 8 or more chunks per call: its setup, ~15 instructions and a few live
// registers, is then paid once for many chunks; H200, 2026-11-30: softmax's whole 32768-wide rows, 8 chunks
// per thread, ran 16% faster with it, while rms_norm, fused_add_rms_norm, layer_norm and rope, 2 chunks per
// thread, ran 1-3% slower and two of them spilled): the tile's rows all inside the tensor, its row starts 16-byte aligned, its columns inside
// the tensor a whole number of 16-byte chunks (no partial chunk), offsets within 32 bits: one 64-bit base,
// 32-bit offsets, and per chunk one cp.async that copies the chunk or, past the row's end, writes zeros
// reading nothing (ignore-src), without a branch. Otherwise (a tile over the tensor's last rows,
// unaligned rows, a partial chunk): whole 16-byte chunks that are in bounds and aligned travel by
// cp.async; edge chunks element by element.
template <int ROWS, int COLS, int LDS, int THREADS, bool SWIZZLE, typename S>
__device__ __forceinline__ void tilex_tile_copy(S* smem, const S* __restrict__ g, long long r0, long long c0,
                                                long long nrows, long long ncols, long long ld) {
  static_assert(!SWIZZLE || (sizeof(S) == 2 && COLS % 64 == 0), "128-byte swizzled tiles hold 2-byte elements, 64 per row segment");
  constexpr int CH = COLS / 8;
  constexpr int ITS = (ROWS * CH + THREADS - 1) / THREADS;
  const unsigned long long pitch = ROWS > 1 ? (unsigned long long)ld * sizeof(S) : 0ull;
  const long long left = ncols - c0;  // columns of each row from c0 to the tensor's end
  // the fast path also needs a thread's chunks to be (it * THREADS) / CH rows and ((it * THREADS) % CH) * 8
  // columns from its first: true when CH divides THREADS or THREADS divides CH
  if (!SWIZZLE && ITS >= 8 && (CH % THREADS == 0 || THREADS % CH == 0) && r0 >= 0 && r0 + ROWS <= nrows && c0 >= 0 && left > 0 &&
      (left >= COLS || left % 8 == 0) && ((reinterpret_cast<unsigned long long>(g + r0 * ld + c0) | pitch) & 15ull) == 0 &&
      (ROWS == 1 || ld <= (0x7fffffffLL - COLS) / ROWS)) {
    const int tid = (int)threadIdx.x;
    const int tr = tid / CH % ROWS, tc = tid % CH * 8;  // this thread's first chunk (% ROWS: replicas past the tile)
    const S* src = g + r0 * ld + c0 + (tr * (int)ld + tc);
    S* dst = smem + tr * LDS + tc;
    const int rem = (left < COLS ? (int)left : COLS) - tc;  // columns inside the row from this thread's first
#pragma unroll
    for (int it = 0; it < ITS; ++it) {
      if ((ROWS * CH) % THREADS != 0 && it * THREADS + tid >= ROWS * CH) break;
      const int r = it * THREADS / CH, c = it * THREADS % CH * 8;
      tilex_cp_async16_or_zero(dst + (r * LDS + c), src + (r * (int)ld + c), c < rem);
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < ITS; ++it) {
    const int i = it * THREADS + threadIdx.x;
    if ((ROWS * CH) % THREADS != 0 && i >= ROWS * CH) break;
    const int r = i / CH, c = (i % CH) * 8;
    const long long gr = r0 + r, gc = c0 + c;
    S* dst = SWIZZLE ? smem + tilex_sw128<ROWS>(r, c) : smem + r * LDS + c;
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

// tilex_tile_copy into padded rows of LDS elements (what ldmatrix and the row kernels read)
template <int ROWS, int COLS, int LDS, int THREADS, typename S>
__device__ __forceinline__ void tilex_tile_to_smem(S* smem, const S* __restrict__ g, long long r0, long long c0,
                                                   long long nrows, long long ncols, long long ld) {
  tilex_tile_copy<ROWS, COLS, LDS, THREADS, false>(smem, g, r0, c0, nrows, ncols, ld);
}

// tilex_tile_copy into a 128-byte swizzled tile (tilex_sw128: sm_90a tensor-core operands)
template <int ROWS, int COLS, int THREADS, typename S>
__device__ __forceinline__ void tilex_tile_to_smem_sw128(S* smem, const S* __restrict__ g, long long r0, long long c0,
                                                         long long nrows, long long ncols, long long ld) {
  tilex_tile_copy<ROWS, COLS, 0, THREADS, true>(smem, g, r0, c0, nrows, ncols, ld);
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

// Store four 8-column blocks of one row of an MMA accumulator fragment (lane 4g + t holds columns 2t, 2t+1
// of every block) as 16-byte chunks: the four lanes of a quad exchange their column pairs (4 shuffles) so
// that lane t holds all 8 columns of block t, then it stores them at element offset `off` (its block's first
// column). v[PS * b + e] is this lane's column 2t + e of block b. Columns [first, last) of the chunk are
// inside the tensor; partial or unaligned chunks go element by element. Every lane of the warp must call it.
template <int PS, typename S>
__device__ __forceinline__ void tilex_store_quad(S* __restrict__ base, long long off, long long first, long long last, bool ok, const float* v) {
  static_assert(sizeof(S) == 2, "quad stores pack 2-byte elements");
  const unsigned t = threadIdx.x & 3u;
  unsigned w[4], out[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int b = 0; b < 4; ++b)
    w[b] = (unsigned)tilex_io<S>::put(v[PS * b]).bits | ((unsigned)tilex_io<S>::put(v[PS * b + 1]).bits << 16);
#pragma unroll
  for (int r = 0; r < 4; ++r) {  // lane t receives, from lane (t - r) & 3, that lane's pair of block t
    const unsigned want = (t + r) & 3u;
    const unsigned send = want == 0 ? w[0] : want == 1 ? w[1] : want == 2 ? w[2] : w[3];
    const unsigned got = __shfl_sync(0xffffffffu, send, (threadIdx.x & ~3u) | ((t - r) & 3u));
    const unsigned from = (t - r) & 3u;
#pragma unroll
    for (int p = 0; p < 4; ++p) out[p] = from == (unsigned)p ? got : out[p];
  }
  S* p = base + off;
  if (ok && first <= 0 && last >= 8 && (reinterpret_cast<unsigned long long>(p) & 15ull) == 0) {
    uint4 q; q.x = out[0]; q.y = out[1]; q.z = out[2]; q.w = out[3];
    *reinterpret_cast<uint4*>(p) = q;
  } else if (ok) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (e >= first && e < last) p[e].bits = (unsigned short)(out[e / 2] >> (16 * (e % 2)));
  }
}
