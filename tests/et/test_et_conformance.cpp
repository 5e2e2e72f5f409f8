// `opal conformance --backend et --cases et` as a test: every ET op x dtype x
// shape of the "et" case set (M in {1, 7, 32}, K up to 8192) on the emulator
// with the coherence checker on, against the scalar reference with the
// conformance runner's tolerances. A node the device faulted on (the CPU ran
// it) counts as a failure, so a coherence hazard or a trap cannot hide.
#include <gtest/gtest.h>

#include "backends/et/host/et_device.h"
#include "backends/factory/conformance.h"

namespace opal {

TEST(EtConformance, EveryEtCasePasses) {
  if (!et_unavailable_reason().empty()) GTEST_SKIP() << et_unavailable_reason();
  ConformanceOptions o;
  o.backends = {"et"};
  o.cases = "et";
  int passed = 0;
  for (const ConformanceResult& r : run_conformance(o)) {
    EXPECT_EQ(r.status, ConformanceResult::Pass) << r.line();
    passed += r.status == ConformanceResult::Pass;
  }
  EXPECT_GE(passed, 84);
}

}  // namespace opal
