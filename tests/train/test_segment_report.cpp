// SegmentReport (train/segment_report.h): a single-rank run has no peers, so its summary steps say
// nothing (the step line already has the rank's times); the across-ranks line and the straggler
// judgement are tested with several ranks in tests/report/test_straggler_runs.cpp.
#include <gtest/gtest.h>

#include "config/obs_config.h"
#include "train/segment_report.h"

using namespace ms;

TEST(SegmentReport, ASingleRankPrintsNoAcrossRanksSummary) {
  ObsConfig cfg;
  cfg.summary_every = 5;
  SegmentReport report(cfg, nullptr, {0}, {"rank 0"});
  for (int step = 1; step <= 10; step++) {
    report.end_step(step, 12.5);
    const auto lines = report.summarize(step);
    EXPECT_TRUE(lines.empty()) << "step " << step << ": " << (lines.empty() ? "" : lines[0].second);
  }
  EXPECT_TRUE(report.stragglers().empty());
}
