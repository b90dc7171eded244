// test_slow_pp_equivalence: the layout suite of pipeline parallelism: every block x attention x
// optimizer variant (sequential / parallel, full / sliding with full_every = 2, AdamW / LAMB) on
// every layout 1x1x2, 1x1x4, 2x1x2, 1x2x2, 2x2x2 (dp x tp x pp), each with 1F1B and with the
// interleaved schedule (v = 2), against the single-process run of the same variant: fp32, same
// seed and global batch, per-step losses within 1e-5 relative and final weights within 3e-5
// relative L2 (pp_runs.h). The engine alternates (Gloo via `megascale launch`, MPI via mpirun) so
// every layout and schedule runs on both over the variants, keeping the suite to ~11 runs per
// variant.
#include <gtest/gtest.h>

#include <string>

#include "common/layout_runs.h"
#include "parallel/pp_runs.h"

using namespace ms::testing;

namespace {

struct Variant {
  std::string block, attention, optim;
  int index;  // picks the engine of each run
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.block << "_" << v.attention << "_" << v.optim; }

class PpEveryVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(PpEveryVariant, EveryLayoutAndScheduleMatchesSingleProcess) {
  const Variant& v = GetParam();
  LayoutRuns runs("pp_all", pp_config());
  const std::string args = tp_variant(v.block, v.attention, v.optim);
  runs.train(megascale_bin(), "ref", args);
  struct Layout { int dp, tp, pp; };
  int k = v.index;
  for (const Layout& l : {Layout{1, 1, 2}, Layout{1, 1, 4}, Layout{2, 1, 2}, Layout{1, 2, 2}, Layout{2, 2, 2}})
    for (bool interleaved : {false, true}) {
      const int n = l.dp * l.tp * l.pp;
      const bool mpi = (k++) % 2 == 1;
      const std::string name = std::string(mpi ? "mpi_" : "gloo_") + std::to_string(l.dp) + "x" + std::to_string(l.tp) +
                               "x" + std::to_string(l.pp) + (interleaved ? "_int" : "_1f1b");
      runs.train(mpi ? mpirun(n) : launch(n), name, args + pp_layout(l.dp, l.tp, l.pp, interleaved));
      runs.expect_same_run("ref", name, 6, kPpLossRel, kPpWeightRel, -1);
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, PpEveryVariant,
                         ::testing::Values(Variant{"sequential", "full", "adamw", 0},
                                           Variant{"sequential", "full", "lamb", 1},
                                           Variant{"sequential", "sliding", "adamw", 0},
                                           Variant{"sequential", "sliding", "lamb", 1},
                                           Variant{"parallel", "full", "adamw", 0},
                                           Variant{"parallel", "full", "lamb", 1},
                                           Variant{"parallel", "sliding", "adamw", 0},
                                           Variant{"parallel", "sliding", "lamb", 1}),
                         [](const auto& info) {
                           return info.param.block + "_" + info.param.attention + "_" + info.param.optim;
                         });

}  // namespace
