// test_run_recorder: the record file's header maps the aligned clock to wall-clock time: an event
// recorded between two readings of the system clock gets, through the header's aligned_ns and
// unix_ns (unix = unix_ns + (t - aligned_ns)), a wall time between those readings; with a clock
// offset set (a rank other than 0) too.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "obs/aligned_clock.h"
#include "obs/run_recorder.h"

namespace {

using namespace ms;

class RunRecorderTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_run_recorder"; }
  void TearDown() override {
    set_clock_offset({});
    TempDirTest::TearDown();
  }
};

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(RunRecorderTest, HeaderMapsRecordTimesToWallClock) {
  for (int64_t offset : {int64_t{0}, int64_t{-123456789012}}) {
    set_clock_offset({offset, 1000});
    const std::string file = path("rank-" + std::to_string(offset != 0) + ".jsonl");
    int64_t before = 0, after = 0;
    {
      RunRecorder rec(file, 50);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the event comes well after the header
      before = wall_ns();
      rec.event("probe", "x");
      after = wall_ns();
    }
    std::ifstream f(file);
    std::string line;
    ASSERT_TRUE(std::getline(f, line));
    const auto header = nlohmann::json::parse(line);
    ASSERT_TRUE(header.contains("aligned_ns") && header.contains("unix_ns")) << line;
    bool found = false;
    while (std::getline(f, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.value("type", "") != "event" || j.value("name", "") != "probe") continue;
      found = true;
      const int64_t wall = header["unix_ns"].get<int64_t>() + (j["t"].get<int64_t>() - header["aligned_ns"].get<int64_t>());
      // The two clocks are read one after the other in the header: allow 2 ms for that.
      EXPECT_GE(wall, before - 2'000'000) << "offset " << offset;
      EXPECT_LE(wall, after + 2'000'000) << "offset " << offset;
    }
    EXPECT_TRUE(found) << "no probe event in " << file;
  }
}

}  // namespace
