// hang_dump.cpp: see hang_dump.h.
#include "obs/hang_dump.h"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "base/atomic_file.h"     // write_text_atomic
#include "base/check.h"           // MS_CHECK
#include "obs/aligned_clock.h"    // clock_offset

namespace ms {

const char* hang_dump_kind_name(HangDumpKind k) {
  switch (k) {
    case HangDumpKind::kSuspect: return "suspect";
    case HangDumpKind::kSignal: return "signal";
    case HangDumpKind::kTimeout: return "timeout";
    case HangDumpKind::kCommError: return "comm_error";
  }
  return "unknown";
}

std::string hang_dump_path(const std::string& out_dir, int rank) {
  return fmt::format("{}/hang/rank-{:05d}.json", out_dir, rank);
}

const char* comm_record_state(const TraceRecord& r) {
  if (r.end_ns == 0) return r.start_ns == 0 ? "queued" : "running";
  return r.status == "ok" ? "ok" : "error";
}

namespace {

int64_t aligned(int64_t steady, int64_t offset) { return steady == 0 ? 0 : steady + offset; }

}  // namespace

nlohmann::json hang_op_json(const TraceRecord& r, const RankIdentity& id, int64_t offset_ns) {
  int peer_world = -1;
  if (r.peer >= 0) {
    auto g = id.groups.find(r.group);
    if (g != id.groups.end() && r.peer < static_cast<int>(g->second.size())) peer_world = g->second[r.peer];
  }
  return {{"op", std::string(r.name)},
          {"group", r.group},
          {"seq", r.seq},
          {"state", comm_record_state(r)},
          {"bytes", r.bytes},
          {"peer", r.peer},
          {"peer_world", peer_world},
          {"step", r.step},
          {"tq", aligned(r.enqueue_ns, offset_ns)},
          {"t0", aligned(r.start_ns, offset_ns)},
          {"t1", aligned(r.end_ns, offset_ns)},
          {"deadline", aligned(r.deadline_ns, offset_ns)},
          {"status", r.status}};
}

nlohmann::json make_hang_dump(const HangDumpInput& in) {
  RankIdentity id = rank_identity();
  if (id.world <= 1 && in.fallback_world > 1) id.rank = in.fallback_rank, id.world = in.fallback_world;
  const ClockOffset clk = clock_offset();
  const int64_t off = clk.offset_ns;
  nlohmann::json doc = identity_json(id);
  doc["format"] = 1;
  doc["kind"] = hang_dump_kind_name(in.kind);
  doc["reason"] = in.reason;
  doc["t"] = aligned(in.now_ns, off);
  doc["unix_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  doc["clock"] = {{"offset_ns", off}, {"rtt_ns", clk.rtt_ns}, {"aligned", clk.rtt_ns != 0 || off != 0}};
  doc["frozen_ns"] = in.frozen_ns;
  doc["frozen_end"] = aligned(in.frozen_end_ns, off);
  // The current segment: the newest compute span still open (end 0), else the newest finished one.
  nlohmann::json seg = nullptr, last = nullptr;
  for (auto it = in.compute.rbegin(); it != in.compute.rend(); ++it) {
    if (it->end_ns == 0 && seg.is_null())
      seg = {{"name", std::string(it->name)}, {"seg", std::string(it->seg)}, {"step", it->step},
             {"t0", aligned(it->start_ns, off)}};
    if (it->end_ns != 0 && last.is_null())
      last = {{"name", std::string(it->name)}, {"seg", std::string(it->seg)}, {"step", it->step},
              {"t0", aligned(it->start_ns, off)}, {"t1", aligned(it->end_ns, off)}};
    if (!seg.is_null() && !last.is_null()) break;
  }
  doc["segment"] = seg;
  doc["last_span"] = last;
  nlohmann::json stuck = nlohmann::json::array();
  for (const TraceRecord& r : in.stuck) stuck.push_back(hang_op_json(r, id, off));
  doc["stuck"] = stuck;
  nlohmann::json ring = nlohmann::json::array();
  const size_t first = in.comm.size() > in.max_ring ? in.comm.size() - in.max_ring : 0;
  for (size_t i = first; i < in.comm.size(); i++) ring.push_back(hang_op_json(in.comm[i], id, off));
  doc["ring"] = ring;
  doc["ring_dropped"] = first;
  return doc;
}

void write_hang_dump(const std::string& path, const nlohmann::json& doc) {
  std::error_code ec;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::filesystem::create_directories(dir, ec);
  MS_CHECK(!ec, "hang dump: cannot create folder '{}': {}", dir, ec.message());
  // Error texts may carry arbitrary bytes from a library: replace invalid UTF-8 rather than fail.
  write_text_atomic(path, doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace ms
