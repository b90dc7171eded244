// record_reader: reads the per-rank record files of a run (`<out_dir>/records/rank-RRRRR.jsonl`,
// docs/observability.md "Record files") back into structs: every rank's header, spans, collectives,
// steps (with the per-segment `ms` map), clock re-alignments and events.
// Guarantees: a last line without its newline (a file being written) is never parsed; a rank file
// that is absent (the headers carry `world`) is listed in `missing`, never an error; a malformed line
// (not JSON, a missing or mistyped field, a record before the header, a header of another rank or
// format) is an ms::Error naming the file, its line number, the field and the reason. Unknown record
// types are skipped (newer writers may add some).
// `RecordTail` reads the same files incrementally (a byte offset per file: each poll returns only the
// lines completed since the last one) for live views; `read_run_records` is one poll of a fresh tail.
// `step_segment_table` turns the step records into the input of obs/straggler.h.
#pragma once
#include <cmath>  // NAN
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "obs/straggler.h"  // SegmentTable

namespace ms {

// A rank's place in the (tp, dp, pp) grid.
struct RankCoord {
  int tp = 0, dp = 0, pp = 0;
};

struct RecordHeader {
  int format = 1;
  int rank = -1;
  int world = 0;
  RankCoord coord;
  std::string order = "tp-dp-pp";   // fastest-varying dimension first
  RankCoord shape{1, 1, 1};         // sizes of the dimensions
  std::string host;
  int64_t pid = 0;
  std::string backend;
  std::map<std::string, std::vector<int>> groups;  // group name -> world ranks in group-rank order
  int64_t offset_ns = 0, rtt_ns = 0;               // clock alignment at start-up
  int64_t unix_ns = 0;                             // wall clock at the alignment
};

struct SpanRecord {
  std::string seg, name;
  int step = -1, mb = -1, chunk = -1;
  int64_t t0 = 0, t1 = 0;
};

struct CommRecord {
  std::string seg, op, group;
  int64_t seq = -1, bytes = 0;
  int peer = -1, peer_world = -1;  // group rank / world rank of the partner (send, recv), else -1
  int step = -1;
  int64_t tq = 0, t0 = 0, t1 = 0;  // enqueued, started, ended
  std::string status = "ok";
};

struct RecordedStep {
  int step = -1;
  int64_t t0 = 0, t1 = 0;
  std::optional<double> loss;  // where this rank knows it
  double lr = 0, tokens_per_s = 0;
  // NaN where the rank does not know them (only rank 0 measures the peaks): model FLOP/s over the
  // hardware peak (MFU), and over the measured GEMM peak.
  double mfu = NAN, mfu_gemm = NAN;
  std::map<std::string, double> ms;      // segment -> milliseconds this step (wall time)
  std::map<std::string, double> cpu_ms;  // compute segment -> thread CPU milliseconds this step
};

struct ClockRecord {
  int step = -1;
  int64_t offset_ns = 0, rtt_ns = 0;
};

struct EventRecord {
  std::string name;
  int step = -1;
  int64_t t = 0;
  std::string detail;
};

// One rank's records, in file order.
struct RankRecords {
  int rank = -1;            // from the file name
  std::string path;
  bool has_header = false;  // false only for a file whose header line is not complete yet
  RecordHeader header;
  std::vector<SpanRecord> spans;
  std::vector<CommRecord> comms;
  std::vector<RecordedStep> steps;
  std::vector<ClockRecord> clocks;
  std::vector<EventRecord> events;

  // "rank 5 (pp=1 dp=0 tp=1)" (just "rank 5" without a header).
  std::string label() const;
  size_t record_count() const { return spans.size() + comms.size() + steps.size() + clocks.size() + events.size(); }
};

struct RunRecords {
  std::string records_dir;
  int world = 0;                  // from the headers (else 1 + the largest rank file seen)
  std::vector<RankRecords> ranks;  // the ranks with a file, ascending
  std::vector<int> missing;        // world ranks without a file, ascending

  const RankRecords* find(int rank) const;  // nullptr when the rank has no file
  // The grid shape and order from any header (1x1x1 "tp-dp-pp" without one).
  RankCoord shape() const;
  std::string order() const;
};

// RUN_DIR/records when that folder exists, else the argument itself (a records folder).
std::string records_dir_of(const std::string& run_dir_or_records_dir);

// Coordinates of world rank `rank` in a grid of `shape` laid out by `order` (e.g. "tp-dp-pp": tp
// varies fastest). Throws on an order that does not name tp, dp and pp once each.
RankCoord coord_of_rank(int rank, const RankCoord& shape, const std::string& order);
// "rank 5 (pp=1 dp=0 tp=1)".
std::string rank_label(int rank, const RankCoord& c);

// Parses one complete line into `into` (where: "file:line" for errors). Used by the readers.
void parse_record_line(const std::string& line, const std::string& where, RankRecords& into);

// Every rank file of a run, read once. Throws when the folder does not exist or holds no rank file.
RunRecords read_run_records(const std::string& run_dir_or_records_dir);

// Incremental reader for a live run: remembers per file the byte offset after its last complete
// line. poll() returns the records completed since the previous poll (each rank's header is
// repeated in every poll once known, so a RankRecords is self-describing), picks up rank files
// that appear later, and starts a file over when it was replaced (another inode: a restarted rank's
// new file, its old one archived, even when the new one is already longer than the old offset),
// rewritten in place (its first bytes changed: a restarted rank truncated it) or shrank. The folder may not exist
// yet (poll returns nothing; a run folder's records/ is looked for again at each poll). Not thread-safe; one tail per reader.
class RecordTail {
 public:
  explicit RecordTail(const std::string& run_dir_or_records_dir);

  // New records since the last poll: `ranks` holds only files with new complete lines (or a new
  // header); `world` and `missing` describe the run as far as known. Throws ms::Error on a malformed
  // line (file:line, field, reason); the offsets stay before it, so a later poll fails again.
  RunRecords poll();

  // The folder read (RUN_DIR/records once it exists, else the argument).
  const std::string& records_dir() const { return dir_; }

 private:
  struct FileState {
    uint64_t offset = 0;  // bytes consumed (complete lines)
    uint64_t inode = 0;   // the file read (0: none yet)
    std::string head;     // its first bytes once read (up to 256: the header, unique per process)
    int64_t lines = 0;    // complete lines consumed
    bool has_header = false;
    RecordHeader header;
  };
  std::string given_;               // the constructor's argument
  std::string dir_;                 // records_dir_of(given_), re-resolved while records/ is absent
  std::map<int, FileState> files_;  // by rank
  int world_ = 0;
};

// Append `fresh` (a poll's result) to `all`: records appended per rank, headers, world and missing
// taken from the newer one.
void append_records(RunRecords& all, RunRecords&& fresh);

// Pseudo-segment of step_segment_table: the step's wall time (t1 - t0) when `ms` has no such key.
inline constexpr const char* kStepTimeSegment = "step";

// The step records' per-segment milliseconds as a straggler table: one row per rank with a header
// (ascending), peer class = its pp coordinate, columns = the last `last_n_steps` steps any rank
// reported (all when <= 0), NaN where a rank has no record of that step or no such segment.
// Every segment in wall time (`ms`), the time the straggler detection judges (obs/straggler.h:
// lost CPU time slows a rank as much as extra work); `cpu_ms` stays in the records for reading.
SegmentTable step_segment_table(const RunRecords& run, const std::vector<std::string>& segments, int last_n_steps);

}  // namespace ms
