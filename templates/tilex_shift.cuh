// tilex device helpers: shifted cp.async rings of the mma.sync main loop (after tilex_mma.cuh: tilex_smem_u32), for
// operands whose row pitch is not known to be a multiple of 16 bytes (templates/matmul_mma.j2, `MatmulPlan.shifted`).
// 16 bytes by cp.async from a 16-byte aligned `gmem`, of which only the first `bytes` (0..16) are read: the rest
// of the chunk is zero-filled (src-size; 0 reads nothing)
__device__ __forceinline__ void tilex_cp_async16_part(void* smem, const void* gmem, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tilex_smem_u32(smem)), "l"(gmem), "r"(bytes) : "memory");
}
// Shifted rings (rows whose starts are not 16-byte aligned: an odd row pitch, an unaligned view). Element shift of
// row gr's first tile element g[gr * ld + c0] in its 16-byte aligned window (0..7 for 2-byte elements).
template <typename S>
__device__ __forceinline__ int tilex_row_shift(const S* g, long long gr, long long c0, long long ld) {
  return (int)(((reinterpret_cast<unsigned long long>(g) + (unsigned long long)(gr * ld + c0) * sizeof(S)) & 15ull) / sizeof(S));
}
// Whether any row of a tile at (r0, c0) of a tensor with row pitch `ld` starts off a 16-byte boundary (then its ring
// is shifted; the column start moves by multiples of 16 elements between trips, so this holds for every trip)
template <typename S>
__device__ __forceinline__ bool tilex_rows_unaligned(const S* g, long long r0, long long c0, long long ld) {
  return ((reinterpret_cast<unsigned long long>(g) + (unsigned long long)(r0 * ld + c0) * sizeof(S)
           | (unsigned long long)ld * sizeof(S)) & 15ull) != 0;
}
// Copy a ROWS x COLS tile at (r0, c0) of a row-major [nrows, ncols] tensor (row pitch `ld`) whose rows need not
// start 16-byte aligned, asynchronously: row r's COLS / 8 + 1 16-byte chunks from the aligned address at or below
// its first element land in smem row r (LDS >= COLS + 8 elements), so its data starts `tilex_row_shift` elements
// in; `tilex_tile_unshift` re-aligns it. Only elements of the tensor are read: a chunk reads up to the row's
// last column (src-size; the rest zero-filled), rows outside [0, nrows) read nothing (zeros), and a window
// starting before the tensor's first element (row 0 of an unaligned base) is copied element by element.
template <int ROWS, int COLS, int LDS, int THREADS, typename S>
__device__ __forceinline__ void tilex_tile_to_smem_shifted(S* smem, const S* __restrict__ g, long long r0, long long c0,
                                                           long long nrows, long long ncols, long long ld) {
  static_assert(sizeof(S) == 2 && COLS % 8 == 0 && LDS >= COLS + 8, "shifted rows hold 2-byte elements and one chunk more");
  constexpr int CH = COLS / 8 + 1;
  constexpr int ITS = (ROWS * CH + THREADS - 1) / THREADS;
#pragma unroll
  for (int it = 0; it < ITS; ++it) {
    const int i = it * THREADS + threadIdx.x;
    if ((ROWS * CH) % THREADS != 0 && i >= ROWS * CH) break;
    const int r = i / CH, j = i % CH;
    const long long gr = r0 + r;
    S* dst = smem + r * LDS + j * 8;
    const long long w0 = c0 - tilex_row_shift(g, gr, c0, ld) + 8 * j;  // the chunk's first column (may be < c0)
    long long n = ncols - w0;  // elements of the chunk before the row's end
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    const bool row_ok = (unsigned long long)gr < (unsigned long long)nrows;
    if (!row_ok || n == 0) {  // reads nothing: any 16-byte aligned address
      tilex_cp_async16_part(dst, reinterpret_cast<const void*>(reinterpret_cast<unsigned long long>(g) & ~15ull), 0u);
    } else if (gr * ld + w0 >= 0) {
      tilex_cp_async16_part(dst, g + (gr * ld + w0), (unsigned)n * (unsigned)sizeof(S));
    } else {
#pragma unroll 1  // the window of row 0 before an unaligned base: once per tile at most
      for (int v = 0; v < 8; ++v) dst[v] = (w0 + v >= 0 && v < n) ? g[w0 + v] : S{};
    }
  }
}
// Re-align a tile tilex_tile_to_smem_shifted copied into `raw` (pitch LDS): chunk j of row r of `dst` (pitch LDD,
// what ldmatrix reads) is columns c0 + 8 j ... of the row, taken from raw chunks j and j + 1 (two 16-byte
// shared loads, a select of the 4-byte word offset and a 2-byte funnel shift). Columns past the tensor's and rows
// outside it are zero already (zero-filled chunks).
template <int ROWS, int COLS, int LDS, int LDD, int THREADS, typename S>
__device__ __forceinline__ void tilex_tile_unshift(S* dst, const S* raw, const S* g, long long r0, long long c0,
                                                   long long ld) {
  static_assert(sizeof(S) == 2 && LDS >= COLS + 8, "shifted rows hold 2-byte elements and one chunk more");
  constexpr int CH = COLS / 8;
  constexpr int ITS = (ROWS * CH + THREADS - 1) / THREADS;
#pragma unroll
  for (int it = 0; it < ITS; ++it) {
    const int i = it * THREADS + threadIdx.x;
    if ((ROWS * CH) % THREADS != 0 && i >= ROWS * CH) break;
    const int r = i / CH, j = i % CH;
    const int s = tilex_row_shift(g, r0 + r, c0, ld);
    const uint4 lo = *reinterpret_cast<const uint4*>(raw + r * LDS + 8 * j);
    const uint4 hi = *reinterpret_cast<const uint4*>(raw + r * LDS + 8 * j + 8);
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int q = s >> 1;
    unsigned x[5];
#pragma unroll
    for (int e = 0; e < 5; ++e) x[e] = q == 0 ? w[e] : q == 1 ? w[e + 1] : q == 2 ? w[e + 2] : w[e + 3];
    uint4 out;
    unsigned* o = reinterpret_cast<unsigned*>(&out);
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = (s & 1) ? __funnelshift_r(x[e], x[e + 1], 16) : x[e];
    *reinterpret_cast<uint4*>(dst + r * LDD + 8 * j) = out;
  }
}
