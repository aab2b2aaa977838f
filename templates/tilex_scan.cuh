// tilex device helpers: the comparison and compare-exchange of sorts and top-k (codegen/scan.py).
// (value, position) pairs in a total order: by value (descending when D), NaN largest, ties and
// -0.0 == 0.0 by the lower position first, so a bitonic network gives the stable sort.
template <bool D, typename T>
__device__ __forceinline__ bool tilex_sort_before(T a, int ia, T b, int ib) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return (na && nb) ? ia < ib : (D ? na : nb);
  if (a == b) return ia < ib;
  return D ? a > b : a < b;
}
// one compare-exchange of a bitonic step: keep the pair's first element in the order when `first`, else the second
template <bool D, typename T>
__device__ __forceinline__ void tilex_bitonic(T& v, int& i, T pv, int pi, bool first) {
  if (tilex_sort_before<D>(v, i, pv, pi) != first) { v = pv; i = pi; }
}
// a compare-exchange of two elements one thread holds (lo has the lower coordinate): lo keeps the pair's
// first element in the order when `fwd`, else the second
template <bool D, typename T>
__device__ __forceinline__ void tilex_bitonic_pair(T& vlo, int& ilo, T& vhi, int& ihi, bool fwd) {
  if (tilex_sort_before<D>(vhi, ihi, vlo, ilo) == fwd) { const T v = vlo; const int i = ilo; vlo = vhi; ilo = ihi; vhi = v; ihi = i; }
}
