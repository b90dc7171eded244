// test_slow_tp_equivalence: every block x attention x optimizer variant (sequential / parallel,
// full / sliding with full_every = 2, AdamW / LAMB) on every tensor-parallel layout (tp = 2,
// tp = 4, tp = 2 x dp = 2), on Gloo (`megascale launch`) and on MPI (`mpirun`), against the
// single-process run of the same variant: fp32, same seed and global batch, per-step losses within
// 1e-5 relative and final weights within 3e-5 relative L2 (tp_runs.h). Gloo and MPI agree bit
// for bit with two ranks per group, not always with four: OpenMPI's 4-rank reductions associate
// the sums differently ((a+b)+(c+d)).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/layout_runs.h"
#include "parallel/tp_runs.h"

using namespace ms::testing;

namespace {

struct Variant {
  std::string block, attention, optim;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.block << "_" << v.attention << "_" << v.optim; }

class TpEveryVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(TpEveryVariant, EveryLayoutOnBothEnginesMatchesSingleProcess) {
  const Variant& v = GetParam();
  LayoutRuns runs("tp_all", kTpConfig);
  const std::string args = tp_variant(v.block, v.attention, v.optim);
  runs.train(megascale_bin(), "ref", args);
  struct Layout { std::string name; int ranks; std::string args; };
  for (const Layout& l : {Layout{"tp2", 2, " --parallel.tp=2 --parallel.tp_chunks=2"},
                          Layout{"tp4", 4, " --parallel.tp=4 --parallel.tp_chunks=2"},
                          Layout{"tp2dp2", 4, " --parallel.tp=2 --parallel.dp=2 --parallel.tp_chunks=2"}}) {
    runs.train(launch(l.ranks), "gloo_" + l.name, args + l.args);
    runs.expect_same_run("ref", "gloo_" + l.name, 6, kTpLossRel, kTpWeightRel, -1);
    runs.train(mpirun(l.ranks), "mpi_" + l.name, args + l.args);
    runs.expect_same_run("ref", "mpi_" + l.name, 6, kTpLossRel, kTpWeightRel, -1);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TpEveryVariant,
                         ::testing::Values(Variant{"sequential", "full", "adamw"}, Variant{"sequential", "full", "lamb"},
                                           Variant{"sequential", "sliding", "adamw"},
                                           Variant{"sequential", "sliding", "lamb"},
                                           Variant{"parallel", "full", "adamw"}, Variant{"parallel", "full", "lamb"},
                                           Variant{"parallel", "sliding", "adamw"}, Variant{"parallel", "sliding", "lamb"}),
                         [](const auto& info) {
                           return info.param.block + "_" + info.param.attention + "_" + info.param.optim;
                         });

}  // namespace
