// record_reader.cpp: see record_reader.h.
#include "obs/record_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>  // NAN
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "obs/rank_identity.h"  // describe_rank
#include "base/check.h"        // MS_CHECK, MS_FAIL
#include "base/json_fields.h"  // JsonFields

namespace ms {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A small integer field (step, rank, microbatch: within +-1e9); optional when a default is given.
int small(const JsonFields& f, std::string_view key) {
  return static_cast<int>(f.integer(key, -1000000000, 1000000000));
}
int small_or(const JsonFields& f, std::string_view key, int dflt) {
  return static_cast<int>(f.integer_or(key, dflt, -1000000000, 1000000000));
}

RankCoord coord(const JsonFields& c) { return RankCoord{small(c, "tp"), small(c, "dp"), small(c, "pp")}; }

RecordHeader parse_header(const JsonFields& f) {
  const std::string& where = f.where();
  RecordHeader h;
  h.format = small(f, "format");
  MS_CHECK(h.format == 1, "{}: field 'format' = {}: this reader knows format 1 only", where, h.format);
  h.rank = small(f, "rank");
  h.world = small(f, "world");
  MS_CHECK(h.world >= 1 && h.rank >= 0 && h.rank < h.world, "{}: field 'rank' = {} is not in a world of {}", where,
           h.rank, h.world);
  h.coord = coord(f.object("coord"));
  h.shape = f.has("shape") ? coord(f.object("shape")) : RankCoord{1, 1, h.world};
  MS_CHECK(h.shape.tp >= 1 && h.shape.dp >= 1 && h.shape.pp >= 1, "{}: field 'shape' has a size below 1", where);
  h.order = f.text_or("order", "tp-dp-pp");
  h.host = f.text_or("host", "");
  h.pid = f.integer_or("pid", 0);
  h.backend = f.text_or("backend", "");
  h.unix_ns = f.integer_or("unix_ns", 0);
  if (f.has("clock")) {
    const JsonFields c = f.object("clock");
    h.offset_ns = c.integer_or("offset_ns", 0);
    h.rtt_ns = c.integer_or("rtt_ns", 0);
  }
  if (f.has("groups")) {
    const JsonFields g = f.object("groups");
    for (const auto& [name, members] : f.at("groups").items()) {
      const nlohmann::json& list = g.array(name);
      std::vector<int>& out = h.groups[name];
      for (const json& m : list) {
        if (!m.is_number_integer()) g.fail_type(name, "an array of world ranks (integers)", list);
        out.push_back(m.get<int>());
      }
    }
  }
  return h;
}

// A {segment: milliseconds} field into out.
void segment_ms(const JsonFields& f, std::string_view key, std::map<std::string, double>& out) {
  const JsonFields m = f.object(key);
  for (const auto& [seg, v] : f.at(key).items()) out[seg] = m.number(seg);
}

// rank-RRRRR.jsonl -> RRRRR, else -1.
int rank_of_file(const std::string& name) {
  const std::string pre = "rank-", suf = ".jsonl";
  if (name.size() <= pre.size() + suf.size() || name.rfind(pre, 0) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoi(digits);
}

}  // namespace

std::string rank_label(int rank, const RankCoord& c) {
  return describe_rank(rank, c.tp, c.dp, c.pp);
}

std::string RankRecords::label() const {
  return has_header ? rank_label(rank, header.coord) : fmt::format("rank {}", rank);
}

const RankRecords* RunRecords::find(int rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), rank, [](const RankRecords& r, int x) { return r.rank < x; });
  return it != ranks.end() && it->rank == rank ? &*it : nullptr;
}

RankCoord RunRecords::shape() const {
  for (const RankRecords& r : ranks)
    if (r.has_header) return r.header.shape;
  return RankCoord{1, 1, std::max(world, 1)};
}

std::string RunRecords::order() const {
  for (const RankRecords& r : ranks)
    if (r.has_header) return r.header.order;
  return "tp-dp-pp";
}

RankCoord coord_of_rank(int rank, const RankCoord& shape, const std::string& order) {
  std::vector<std::string> dims;
  size_t start = 0;
  for (;;) {
    const size_t dash = order.find('-', start);
    dims.push_back(order.substr(start, dash == std::string::npos ? std::string::npos : dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  std::vector<std::string> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  MS_CHECK(sorted == std::vector<std::string>({"dp", "pp", "tp"}), "layout order '{}' must name tp, dp and pp once each",
           order);
  RankCoord c;
  int rest = rank;
  for (const std::string& d : dims) {
    int& slot = d == "tp" ? c.tp : d == "dp" ? c.dp : c.pp;
    const int n = d == "tp" ? shape.tp : d == "dp" ? shape.dp : shape.pp;
    slot = rest % std::max(n, 1);
    rest /= std::max(n, 1);
  }
  return c;
}

std::string records_dir_of(const std::string& run_dir_or_records_dir) {
  const fs::path p(run_dir_or_records_dir);
  if (fs::is_directory(p / "records")) return (p / "records").string();
  return p.string();
}

void parse_record_line(const std::string& line, const std::string& where, RankRecords& into) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    MS_FAIL("{}: not a JSON line ({})", where, e.what());
  }
  MS_CHECK(j.is_object(), "{}: a record must be a JSON object", where);
  const JsonFields f(j, where);
  const std::string type = f.text("type");
  if (type == "header") {
    // A later header: the rank was started again (a resumed run appending to its file); it replaces
    // the first one, the records before it stay.
    into.header = parse_header(f);
    MS_CHECK(into.rank < 0 || into.header.rank == into.rank, "{}: header of rank {} in the file of rank {}", where,
             into.header.rank, into.rank);
    into.rank = into.header.rank;
    into.has_header = true;
    return;
  }
  MS_CHECK(into.has_header, "{}: a '{}' record before the header (the file's first line must be the header)", where,
           type);
  if (type == "span") {
    SpanRecord s;
    s.seg = f.text("seg");
    s.name = f.text_or("name", s.seg);
    s.step = small(f, "step");
    s.mb = small_or(f, "mb", -1);
    s.chunk = small_or(f, "chunk", -1);
    s.t0 = f.integer("t0");
    s.t1 = f.integer("t1");
    MS_CHECK(s.t1 >= s.t0, "{}: field 't1' = {} is before 't0' = {}", where, s.t1, s.t0);
    into.spans.push_back(std::move(s));
  } else if (type == "comm") {
    CommRecord c;
    c.seg = f.text("seg");
    c.op = f.text("op");
    c.group = f.text("group");
    c.seq = f.integer("seq");
    c.bytes = f.integer_or("bytes", 0);
    c.peer = small_or(f, "peer", -1);
    c.peer_world = small_or(f, "peer_world", -1);
    c.step = small(f, "step");
    c.t0 = f.integer("t0");
    c.t1 = f.integer("t1");
    c.tq = f.integer_or("tq", c.t0);
    c.status = f.text_or("status", "ok");
    // 0 = not reached (an op that never started or never ended, written by a dump): a point.
    if (c.t0 == 0 && c.tq != 0) c.t0 = c.tq;
    if (c.t1 == 0) c.t1 = c.t0;
    MS_CHECK(c.t1 >= c.t0, "{}: field 't1' = {} is before 't0' = {}", where, c.t1, c.t0);
    into.comms.push_back(std::move(c));
  } else if (type == "step") {
    RecordedStep s;
    s.step = small(f, "step");
    s.t0 = f.integer("t0");
    s.t1 = f.integer("t1");
    if (f.has("loss")) s.loss = f.number("loss");
    s.lr = f.number_or("lr", 0);
    s.tokens_per_s = f.number_or("tokens_per_s", 0);
    s.mfu = f.number_or("mfu", NAN);
    s.mfu_gemm = f.number_or("mfu_gemm", NAN);
    segment_ms(f, "ms", s.ms);
    if (f.has("cpu_ms")) segment_ms(f, "cpu_ms", s.cpu_ms);
    into.steps.push_back(std::move(s));
  } else if (type == "clock") {
    ClockRecord c;
    c.step = small(f, "step");
    c.offset_ns = f.integer("offset_ns");
    c.rtt_ns = f.integer_or("rtt_ns", 0);
    into.clocks.push_back(c);
  } else if (type == "event") {
    EventRecord e;
    e.name = f.text("name");
    e.step = small_or(f, "step", -1);
    e.t = f.integer("t");
    e.detail = f.text_or("detail", "");
    into.events.push_back(std::move(e));
  }
  // Other types: written by a newer writer; skipped.
}

RecordTail::RecordTail(const std::string& run_dir_or_records_dir)
    : given_(run_dir_or_records_dir), dir_(records_dir_of(run_dir_or_records_dir)) {}

RunRecords RecordTail::poll() {
  if (const std::string d = records_dir_of(given_); d != dir_) {  // records/ appeared in the run folder
    dir_ = d;
    files_.clear();
    world_ = 0;
  }
  RunRecords out;
  out.records_dir = dir_;
  std::error_code ec;
  if (fs::is_directory(dir_, ec)) {
    std::vector<std::pair<int, fs::path>> found;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
      const int r = rank_of_file(e.path().filename().string());
      if (r >= 0 && e.is_regular_file(ec)) found.emplace_back(r, e.path());
    }
    std::sort(found.begin(), found.end());
    for (const auto& [rank, path] : found) {
      const bool first_seen = !files_.count(rank);
      FileState& st = files_[rank];
      struct stat sb{};
      if (::stat(path.c_str(), &sb) != 0) continue;  // vanished meanwhile
      const uint64_t size = static_cast<uint64_t>(sb.st_size), inode = static_cast<uint64_t>(sb.st_ino);
      // Replaced (a restarted rank's new file under the same name), shrank, or rewritten in place (a
      // restarted rank truncates the file it was not moved from: its first bytes, the header with
      // the process's own pid and clock, differ): read it anew.
      if ((st.inode != 0 && st.inode != inode) || size < st.offset) st = FileState{};
      if (!st.head.empty() && size != st.offset) {  // nothing new: nothing to re-check
        std::string now(st.head.size(), '\0');
        std::ifstream hin(path, std::ios::binary);
        hin.read(now.data(), static_cast<std::streamsize>(now.size()));
        if (static_cast<size_t>(hin.gcount()) != now.size() || now != st.head) st = FileState{};
      }
      st.inode = inode;
      const bool had_header = st.has_header;
      RankRecords rr;
      rr.rank = rank;
      rr.path = path.string();
      rr.has_header = st.has_header;
      rr.header = st.header;
      if (size > st.offset) {
        std::ifstream in(path, std::ios::binary);
        MS_CHECK(in.good(), "{}: cannot open", rr.path);
        in.seekg(static_cast<std::streamoff>(st.offset));
        std::string text(size - st.offset, '\0');
        in.read(text.data(), static_cast<std::streamsize>(text.size()));
        text.resize(static_cast<size_t>(in.gcount()));
        // Parse the complete lines into a copy; commit offsets only when all parsed.
        FileState next = st;
        size_t pos = 0;
        for (;;) {
          const size_t nl = text.find('\n', pos);
          if (nl == std::string::npos) break;  // an incomplete last line: left for the next poll
          next.lines++;
          std::string line = text.substr(pos, nl - pos);
          if (!line.empty() && line.back() == '\r') line.pop_back();
          pos = nl + 1;
          if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
          parse_record_line(line, fmt::format("{}:{}", rr.path, next.lines), rr);
        }
        if (next.offset == 0 && pos > 0) next.head = text.substr(0, std::min<size_t>(pos, 256));  // the file's identity
        next.offset += pos;
        next.has_header = rr.has_header;
        next.header = rr.header;
        st = next;
      }
      if (rr.has_header) world_ = std::max(world_, rr.header.world);
      world_ = std::max(world_, rank + 1);
      if (first_seen || rr.record_count() > 0 || (rr.has_header && !had_header)) out.ranks.push_back(std::move(rr));
    }
  }
  out.world = world_;
  for (int r = 0; r < world_; r++)
    if (!files_.count(r)) out.missing.push_back(r);
  return out;
}

void append_records(RunRecords& all, RunRecords&& fresh) {
  auto move_into = [](auto& dst, auto& src) {
    dst.insert(dst.end(), std::make_move_iterator(src.begin()), std::make_move_iterator(src.end()));
  };
  if (all.records_dir.empty()) all.records_dir = fresh.records_dir;
  all.world = std::max(all.world, fresh.world);
  all.missing = std::move(fresh.missing);
  for (RankRecords& f : fresh.ranks) {
    auto it = std::lower_bound(all.ranks.begin(), all.ranks.end(), f.rank,
                               [](const RankRecords& r, int x) { return r.rank < x; });
    if (it == all.ranks.end() || it->rank != f.rank) {
      all.ranks.insert(it, std::move(f));
      continue;
    }
    it->path = f.path;
    it->has_header = f.has_header;
    it->header = f.header;
    move_into(it->spans, f.spans);
    move_into(it->comms, f.comms);
    move_into(it->steps, f.steps);
    move_into(it->clocks, f.clocks);
    move_into(it->events, f.events);
  }
}

RunRecords read_run_records(const std::string& run_dir_or_records_dir) {
  const std::string dir = records_dir_of(run_dir_or_records_dir);
  MS_CHECK(fs::is_directory(dir), "{}: no such folder (expected a run folder with records/ or a records folder)",
           run_dir_or_records_dir);
  RecordTail tail(dir);
  RunRecords run = tail.poll();  // the first poll lists every rank file, even an empty one
  MS_CHECK(!run.ranks.empty(), "{}: no rank-RRRRR.jsonl record files (is obs.records on?)", dir);
  return run;
}

SegmentTable step_segment_table(const RunRecords& run, const std::vector<std::string>& segments, int last_n_steps) {
  SegmentTable t;
  t.segments = segments;
  std::set<int> steps;
  std::vector<const RankRecords*> rows;
  for (const RankRecords& r : run.ranks) {
    if (!r.has_header) continue;
    rows.push_back(&r);
    t.ranks.push_back(r.rank);
    t.peer_class.push_back(r.header.coord.pp);
    for (const RecordedStep& s : r.steps) steps.insert(s.step);
  }
  t.steps.assign(steps.begin(), steps.end());
  if (last_n_steps > 0 && t.steps.size() > static_cast<size_t>(last_n_steps))
    t.steps.erase(t.steps.begin(), t.steps.end() - last_n_steps);
  t.resize_nan();
  for (size_t row = 0; row < rows.size(); row++) {
    for (const RecordedStep& s : rows[row]->steps) {
      auto col = std::lower_bound(t.steps.begin(), t.steps.end(), s.step);
      if (col == t.steps.end() || *col != s.step) continue;
      for (size_t k = 0; k < segments.size(); k++) {
        auto it = s.ms.find(segments[k]);
        double v = NAN;
        if (it != s.ms.end()) v = it->second;
        else if (segments[k] == kStepTimeSegment) v = static_cast<double>(s.t1 - s.t0) / 1e6;
        t.at(row, static_cast<size_t>(col - t.steps.begin()), k) = v;
      }
    }
  }
  return t;
}

}  // namespace ms
