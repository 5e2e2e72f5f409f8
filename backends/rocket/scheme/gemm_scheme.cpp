// The shape of the int8 GEMM scheme (see gemm_scheme.h).
#include "backends/rocket/scheme/gemm_scheme.h"

#include <algorithm>

#include "backends/rocket/op/conv_op.h"
#include "backends/rocket/scheme/hadamard.h"
#include "core/error.h"

namespace opal::rocket {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::W8A8: return "w8a8";
    case Precision::W8A16: return "w8a16";
    case Precision::W16A8: return "w16a8";
    case Precision::W16A16: return "w16a16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::W8A8, Precision::W8A16, Precision::W16A8, Precision::W16A16})
    if (s == precision_name(p)) return p;
  fail("rocket: unknown precision '{}' (w8a8, w8a16, w16a8, w16a16)", s);
}

unsigned weight_planes(Precision p) { return p == Precision::W16A8 || p == Precision::W16A16 ? 2 : 1; }
unsigned input_planes(Precision p) { return p == Precision::W8A16 || p == Precision::W16A16 ? 2 : 1; }

std::vector<PlaneTerm> plane_terms(unsigned input_planes, unsigned weight_planes) {
  if (input_planes < 1 || input_planes > 2 || weight_planes < 1 || weight_planes > 2)
    fail("rocket: {} input / {} weight planes (1 or 2 each)", input_planes, weight_planes);
  std::vector<PlaneTerm> t{{0, 0}};
  if (weight_planes == 2) t.push_back({0, 1});
  if (input_planes == 2) t.push_back({1, 0});
  return t;
}

std::vector<KSegment> split_k(unsigned k_padded, unsigned max_k) {
  if (k_padded == 0 || k_padded % 32 != 0) fail("rocket: padded K {} is not a positive multiple of 32", k_padded);
  if (max_k < 32 || max_k % 32 != 0) fail("rocket: K segment limit {} is not a multiple of 32", max_k);
  const unsigned n_seg = div_up(k_padded, max_k);
  // Equal segments (multiples of 32) rather than max_k + remainder: balances the tasks.
  const unsigned per = align_up(div_up(k_padded, n_seg), 32);
  std::vector<KSegment> s;
  for (unsigned k0 = 0; k0 < k_padded; k0 += per) s.push_back({k0, std::min(per, k_padded - k0)});
  return s;
}

std::vector<std::pair<unsigned, unsigned>> split_n(unsigned n, unsigned parts) {
  if (parts == 0) fail("rocket: N split into 0 parts");
  const unsigned per = align_up(div_up(n, parts), 32);
  std::vector<std::pair<unsigned, unsigned>> r;
  for (unsigned n0 = 0; n0 < n; n0 += per) r.push_back({n0, std::min(per, n - n0)});
  return r;
}

QuantScheme make_scheme(unsigned k, bool rotate, unsigned group, Precision precision) {
  QuantScheme s;
  s.weight_planes = weight_planes(precision);
  s.input_planes = input_planes(precision);
  const unsigned kp = align_up(k, 32);
  s.group = group ? std::min(align_up(group, 32), kp) : 0;
  if (s.group == kp) s.group = 0;
  if (rotate) {
    s.rotation_block = rotation_block(kp);
    if (s.group) s.rotation_block = std::min(s.rotation_block, rotation_block(s.group));
  }
  return s;
}

}  // namespace opal::rocket
