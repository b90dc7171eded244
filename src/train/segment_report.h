// segment_report: the always-on segment timers of a training run, per step and across ranks.
// At each step's end it takes the step's segment totals from the trace sink (obs/trace_sink.h:
// every compute span and collective, by segment) for the rank's record file; every
// obs.summary_every steps it gathers the last steps' times of a fixed set of segments over the
// world (one all-gather) and rank 0 reports, per segment, min / median / max of the ranks' mean ms
// per step with the rank of the max, and the stragglers among compute segments (obs/straggler.h:
// peers = ranks of the same pipeline stage; chronic lag named as stragglers, one-off stalls said
// as such). Compute segments are judged on their thread CPU time (extra work) and their summed wall
// time ("compute": CPU time lost to a noisy neighbour), each step with its waits on communication
// (the straggler arrives last and waits least), so a rank slowed either way is named
// (docs/observability.md "Stragglers"). A collective over the world when it summarizes: every rank calls end_step every step.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "config/obs_config.h"
#include "obs/straggler.h"    // Straggler
#include "obs/trace_sink.h"   // TraceSink::SegmentTotal

namespace ms {

// The segments gathered for the summary, in order; the step's wall time is "step".
const std::vector<std::string>& summary_segments();

class SegmentReport {
 public:
  // world: nullptr for a single process (the summary then covers rank 0 alone). Indexed by world
  // rank: peer_class, each rank's pipeline coordinate (peers are judged against each other), and
  // labels for the messages ("rank 5 (pp=1 dp=0 tp=1)").
  SegmentReport(const ObsConfig& cfg, Communicator* world, std::vector<int> peer_class,
                std::vector<std::string> labels);

  struct SegmentMs {
    std::string_view seg;
    double ms = 0;       // wall time
    double cpu_ms = 0;   // thread CPU time (compute spans; 0 for collectives)
  };
  // This step's segment times, the step's wall time `step_ms` included as "step".
  const std::vector<SegmentMs>& end_step(int step, double step_ms);

  // What rank 0 should log after end_step(step), when step is a summary step (else empty): the
  // summary line and one line per straggler (chronic) or stall (one-off); nothing with a single
  // rank (no peers to compare). Collective when it is a summary step. The chronic stragglers of the last summary are in stragglers().
  std::vector<std::pair<std::string, std::string>> summarize(int step);  // (event, text)
  const std::vector<Straggler>& stragglers() const { return stragglers_; }

 private:
  ObsConfig cfg_;
  Communicator* world_;
  std::vector<int> classes_;      // per world rank: pipeline stage
  std::vector<std::string> labels_;
  std::vector<TraceSink::SegmentTotal> totals_;
  std::vector<SegmentMs> step_ms_;
  std::vector<int> steps_;        // steps since the last summary
  std::vector<float> mine_;       // per step: summary_segments() wall ms, judged segments' CPU ms, the wait_segments() sum
  // Rank 0: the gathered window (last straggler_window steps) for straggler detection.
  std::vector<int> hist_steps_;
  std::vector<float> hist_;       // per step: world x segments
  std::vector<Straggler> stragglers_;
};

}  // namespace ms
