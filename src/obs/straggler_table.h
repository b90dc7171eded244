// straggler_table: the input of the straggler judgment (obs/straggler.h) from a run's step records
// (obs/record_reader.h), the one construction behind `megascale heatmap` and the dashboard (the
// training log builds the same table from its gathered segment times, train/segment_report.h).
// Guarantees: one row per rank with a header, peer class = its pp coordinate, the last `window`
// steps; the judged compute segments that occur in those step records, each in thread CPU time
// (`cpu_ms`) where the record has it, else wall time (`ms`); then, when some record of the window
// has CPU times, the kComputeSegment row: the segments' summed wall time (NaN where a record has
// none of them). The per-step communication wait (the sum of wait_segments(), 0 where a step
// record has none of them) is filled in only when some step record of the window has a wait
// segment (records without any, e.g. of an older writer, are judged on time alone).
#pragma once
#include "obs/record_reader.h"  // RunRecords
#include "obs/straggler.h"      // SegmentTable

namespace ms {

// The last `window` steps (all when <= 0) of the judged rows, with waits.
SegmentTable straggler_table(const RunRecords& run, int window);

}  // namespace ms
