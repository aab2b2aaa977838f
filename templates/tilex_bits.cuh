// tilex device helpers: narrow integers (i8, u8, i16, u16: stored in their width, computed in int) and shifts.
template <> struct tilex_io<signed char> { __device__ static int get(signed char x) { return x; } __device__ static signed char put(int f) { return (signed char)f; } };
template <> struct tilex_io<unsigned char> { __device__ static int get(unsigned char x) { return x; } __device__ static unsigned char put(int f) { return (unsigned char)f; } };
template <> struct tilex_io<short> { __device__ static int get(short x) { return x; } __device__ static short put(int f) { return (short)f; } };
template <> struct tilex_io<unsigned short> { __device__ static int get(unsigned short x) { return x; } __device__ static unsigned short put(int f) { return (unsigned short)f; } };
// a << b and a >> b (arithmetic) on int / long long; an amount outside [0, width) shifts every bit out
// (<< gives 0, >> the sign), as the interpreter does: C leaves those shifts undefined
__device__ __forceinline__ int tilex_shl(int a, int b) { return (unsigned)b < 32u ? (int)((unsigned)a << b) : 0; }
__device__ __forceinline__ long long tilex_shl(long long a, long long b) { return (unsigned long long)b < 64ull ? (long long)((unsigned long long)a << b) : 0ll; }
__device__ __forceinline__ int tilex_shr(int a, int b) { return (unsigned)b < 32u ? a >> b : a >> 31; }
__device__ __forceinline__ long long tilex_shr(long long a, long long b) { return (unsigned long long)b < 64ull ? a >> b : a >> 63; }
