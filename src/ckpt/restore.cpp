// restore.cpp: see restore.h.
#include "ckpt/restore.h"

#include <algorithm>  // std::sort
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"               // MS_CHECK
#include "base/clock.h"               // Stopwatch
#include "base/log.h"                 // logger
#include "ckpt/checkpoint_reader.h"   // CheckpointReader
#include "ckpt/checkpointer.h"        // checkpoint_step_of
#include "ckpt/ckpt_comm.h"           // broadcast_text, any_rank
#include "ckpt/data_stream.h"         // data_stream_of
#include "comm/communicator.h"        // Communicator
#include "model/param_layout.h"       // slice_param
#include "config/resume_spec.h"       // parse_resume
#include "parallel/parallel_model.h"  // ParallelModel

namespace ms {

std::vector<std::string> checkpoint_candidates(const CheckpointStorage& storage,
                                               const std::function<void(const std::string&)>& note) {
  std::vector<std::pair<int, std::string>> steps;
  for (const std::string& n : storage.list())
    if (const int s = checkpoint_step_of(n); s >= 0) steps.push_back({s, n});
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> out;
  if (storage.exists("latest")) {
    // At most a short name, never through a symlink (its target's text is not for the log).
    std::string target, problem;
    try {
      target = storage.read_pointer("latest", 64);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty() && checkpoint_step_of(target) >= 0 && storage.exists(target)) out.push_back(target);
    else if (problem.empty())
      note(fmt::format("{}/latest names '{}', which is not a checkpoint folder there; trying the step folders, "
                       "newest first", storage.describe(), checkpoint_step_of(target) >= 0 ? target : "(not a step folder name)"));
    else note(fmt::format("{}; trying the step folders, newest first", problem));
  }
  for (const auto& [s, n] : steps)
    if (out.empty() || n != out[0]) out.push_back(n);
  return out;
}

Manifest check_checkpoint(const CheckpointStorage& storage, const std::string& dir, const Config& cfg,
                          std::string* text) {
  const std::string where = storage.describe() + "/" + dir;
  MS_CHECK(storage.exists(dir), "{}: no such checkpoint folder", where);
  MS_CHECK(storage.exists(dir + "/manifest.json"), "{}: manifest.json is missing (an incomplete checkpoint)", where);
  std::string json = storage.read_text(dir + "/manifest.json");
  Manifest m = parse_manifest(json, where + "/manifest.json");
  const std::string diff = model_difference(m, cfg);
  MS_CHECK(diff.empty(), "{}: saved for another model: {}", where, diff);
  // The tensors' shapes against the model's layout, both ways, before any byte is copied: the
  // restore copies every entry into buffers of the model's size.
  const std::string shapes = tensor_difference(m, cfg.model);
  MS_CHECK(shapes.empty(), "{}/manifest.json: the tensors do not match the model: {}", where, shapes);
  if (const int s = checkpoint_step_of(std::filesystem::path(dir).filename().string()); s >= 0)
    MS_CHECK(s == m.step, "{}: the manifest says step {}, the folder's name step {}", where, m.step, s);
  for (const ManifestFile& f : m.files) {
    MS_CHECK(storage.exists(dir + "/" + f.name), "{}: {} is missing", where, f.name);
    const uint64_t n = storage.size(dir + "/" + f.name);
    MS_CHECK(n == f.bytes, "{}/{}: {} bytes, the manifest says {} (truncated or replaced)", where, f.name, n, f.bytes);
  }
  if (text) *text = std::move(json);
  return m;
}

namespace {

// Where one of this rank's tensors comes from: part `part` of checkpoint tensor `name` (saved under
// this TP degree), or the whole tensor (part -1), cut again for this rank's TP part when `cut`.
struct Source {
  const ParamSpec* spec;
  std::string name;
  int part;
  bool cut;
};

std::vector<Source> sources_of(const CheckpointReader& reader, const GPT& m, StateKind kind, const Config& cfg,
                               const CheckpointRank& who) {
  const int tp = cfg.parallel.tp;
  const bool tied = cfg.model.tie_embeddings;  // untied: lm_head.weight is the model's own tensor
  const bool has_head_copy = tied && reader.manifest().tensors.count(kHeadCopyName) > 0;
  std::vector<Source> out;
  for (const ParamSpec& s : m.param_specs()) {
    // The head stage's copy of the tied embedding: its own saved copy when the saving run had one
    // (pipeline), else the token embedding it equals.
    const bool head_copy = tied && cfg.parallel.pp > 1 && !m.has_embedding() && s.name == token_embedding_name(cfg.model);
    const std::string name = head_copy && has_head_copy ? kHeadCopyName : s.name;
    const bool cut = tp > 1 && s.sharded();
    const int saved = reader.saved_parts(name, kind);
    out.push_back({&s, name, saved == (cut ? tp : 1) ? (cut ? who.tp : 0) : -1, cut});
  }
  return out;
}

// This rank's chunks as whole buffers of their layouts (params, exp_avg, exp_avg_sq per chunk),
// cut from the checkpoint's whole tensors for this rank's TP part. The files they need are read and
// verified first, on every core of the machine at once (CheckpointReader::verify_files).
std::vector<std::vector<float>> read_chunks(CheckpointReader& reader, ParallelModel& model, const Config& cfg,
                                            const CheckpointRank& who) {
  std::vector<std::string> files;
  for (int c = 0; c < model.num_chunks(); c++)
    for (StateKind kind : kStateKinds)
      for (const Source& x : sources_of(reader, model.chunk(c), kind, cfg, who))
        for (std::string& f : reader.files_of(x.name, kind, x.part)) files.push_back(std::move(f));
  reader.verify_files(files, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<std::vector<float>> out;
  const int tp = cfg.parallel.tp;
  for (int c = 0; c < model.num_chunks(); c++) {
    const GPT& m = model.chunk(c);
    for (StateKind kind : kStateKinds) {
      std::vector<float> buf(m.num_params());
      for (const Source& x : sources_of(reader, m, kind, cfg, who)) {
        const ParamSpec& s = *x.spec;
        if (x.part >= 0) {
          const std::vector<float> mine = reader.part(x.name, kind, x.part);
          MS_CHECK(mine.size() == s.numel(), "checkpoint tensor '{}' ({}): {} elements, the model's part {}", x.name,
                   state_kind_name(kind), mine.size(), s.numel());
          std::copy(mine.begin(), mine.end(), buf.begin() + static_cast<std::ptrdiff_t>(s.offset));
          continue;
        }
        const std::vector<float> full = reader.whole(x.name, kind);
        MS_CHECK(full.size() == s.full_numel(), "checkpoint tensor '{}' ({}): {} elements, the model's {}", x.name,
                 state_kind_name(kind), full.size(), s.full_numel());
        if (x.cut) slice_param(s, tp, who.tp, full.data(), buf.data() + s.offset);
        else std::copy(full.begin(), full.end(), buf.begin() + static_cast<std::ptrdiff_t>(s.offset));
      }
      out.push_back(std::move(buf));
    }
  }
  return out;
}

// The reader's state to the rest of its data-parallel group: the weights whole (every rank holds
// them), each rank's own ZeRO ranges of the two moments (sent to it alone: 2/dp of the moments
// instead of all of them).
void send_to_group(Communicator& dp, ParallelModel& pm, std::vector<std::vector<float>>& state) {
  for (int c = 0; c < pm.num_chunks(); c++) {
    dp.broadcast(state[3 * c].data(), state[3 * c].size(), DType::kF32, 0);
    auto ranges_of = [&](int r) { return pm.owned_ranges(c, dp.size(), r); };
    std::vector<float> packed;
    if (dp.rank() == 0) {
      for (int r = 1; r < dp.size(); r++) {
        packed.clear();
        const auto ranges = ranges_of(r);
        for (int k = 1; k <= 2; k++)
          for (const auto& [lo, hi] : ranges) packed.insert(packed.end(), state[3 * c + k].begin() + lo, state[3 * c + k].begin() + hi);
        dp.send(packed.data(), packed.size() * sizeof(float), r, static_cast<uint32_t>(c));
      }
    } else {
      const auto ranges = ranges_of(dp.rank());
      size_t n = 0;
      for (const auto& [lo, hi] : ranges) n += hi - lo;
      packed.resize(2 * n);
      dp.recv(packed.data(), packed.size() * sizeof(float), 0, static_cast<uint32_t>(c));
      size_t at = 0;
      for (int k = 1; k <= 2; k++)
        for (const auto& [lo, hi] : ranges) {
          std::copy(packed.begin() + at, packed.begin() + at + (hi - lo), state[3 * c + k].begin() + lo);
          at += hi - lo;
        }
    }
  }
}

}  // namespace

RestoreResult restore_checkpoint(const Config& cfg, ParallelModel& model, const CheckpointStorage& storage,
                                 Communicator* world, Communicator* dp, CheckpointRank who,
                                 const std::function<void(const std::string&)>& log) {
  const Stopwatch watch;
  RestoreResult res;
  const std::string& mode = cfg.train.resume;  // for the messages
  const ResumeSpec resume = parse_resume(mode);
  if (resume.mode == ResumeMode::kNever) return res;
  const bool explicit_path = resume.mode == ResumeMode::kPath;
  // A PATH is read where it is: its parent folder is the storage root.
  std::unique_ptr<LocalStorage> own;
  const CheckpointStorage* st = &storage;
  std::vector<std::string> candidates;
  if (explicit_path) {
    const std::filesystem::path p = std::filesystem::absolute(resume.path).lexically_normal();
    const std::filesystem::path dir = p.filename().empty() ? p.parent_path() : p;
    own = std::make_unique<LocalStorage>(dir.parent_path().string(), /*create=*/false);
    st = own.get();
    candidates = {dir.filename().string()};
  } else if (who.rank == 0) {
    candidates = checkpoint_candidates(storage, log);
  }
  const bool reader = !cfg.checkpoint.broadcast_restore || !dp || dp->size() == 1 || dp->rank() == 0;
  for (size_t i = 0;; i++) {
    // Rank 0 proposes the next candidate that passes its checks: "OK <dir>\n<manifest>", or says
    // there is none left ("END"), or that the one asked for is unusable ("ERROR <reason>").
    std::string msg;
    std::optional<Manifest> checked;  // rank 0: the manifest it checked (the others parse the broadcast)
    std::optional<ManifestDataStream> stream;  // rank 0: this run's data stream
    if (who.rank == 0) {
      msg = "END";
      for (; i < candidates.size(); i++) {
        try {
          std::string text;
          checked = check_checkpoint(*st, candidates[i], cfg, &text);
          // Another data stream: the saved sample index would continue a different order.
          if (!stream) stream = data_stream_of(cfg);
          if (const std::string ds = data_stream_difference(checked->data_stream, *stream); !ds.empty()) {
            const std::string what = fmt::format(
                "saved for another data stream: {}; its data position (epoch {} sample {}) would continue a "
                "different order", ds, checked->data.epoch, checked->data.index);
            MS_CHECK(!explicit_path, "{}/{}: {}", st->describe(), candidates[i], what);
            logger().warn("checkpoint {}: {}", candidates[i], what);
            log(fmt::format("WARNING: checkpoint {} {}; resuming from it anyway (train.resume=auto)", candidates[i],
                            what));
          }
          msg = "OK " + candidates[i] + "\n" + text;
          break;
        } catch (const std::exception& e) {
          if (explicit_path) {
            msg = fmt::format("ERROR train.resume={}: {}", mode, e.what());
            break;
          }
          log(fmt::format("checkpoint {} skipped: {}", candidates[i], e.what()));
        }
      }
    }
    broadcast_text(world, msg, 0);
    if (msg.starts_with("ERROR ")) MS_FAIL("{}", msg.substr(6));
    if (msg == "END") {
      MS_CHECK(!explicit_path, "train.resume={}: no usable checkpoint", mode);
      if (who.rank == 0 && !candidates.empty()) log("no checkpoint verifies; starting from scratch");
      res.seconds = watch.seconds();
      return res;
    }
    const size_t nl = msg.find('\n');
    const std::string dir = msg.substr(3, nl - 3);
    Manifest m = checked ? std::move(*checked) : parse_manifest(msg.substr(nl + 1), st->describe() + "/" + dir + "/manifest.json");
    // The readers read and verify; nothing is installed until every rank has what it needs.
    std::vector<std::vector<float>> state;
    std::string failure;
    CheckpointReader rd(*st, dir, m, cfg.model);
    const Stopwatch read_watch;
    if (reader) {
      try {
        state = read_chunks(rd, model, cfg, who);
      } catch (const std::exception& e) {
        failure = e.what();
        logger().error("rank {}: checkpoint {}: {}", who.rank, dir, failure);
      }
    }
    res.read_seconds = read_watch.seconds();
    const Stopwatch agree_watch;
    if (any_rank(world, !failure.empty())) {
      MS_CHECK(!explicit_path, "train.resume={}: the checkpoint failed verification{}", mode,
               failure.empty() ? " on another rank (see its error)" : ": " + failure);
      if (who.rank == 0)
        log(fmt::format("checkpoint {} skipped: {}", dir, failure.empty() ? "a file failed verification on another "
                                                                             "rank (see its error)" : failure));
      continue;  // rank 0 proposes the next one
    }
    if (!reader) {
      state.resize(3 * static_cast<size_t>(model.num_chunks()));
      for (int c = 0; c < model.num_chunks(); c++)
        for (int k = 0; k < 3; k++) state[3 * c + k].resize(model.chunk(c).num_params());
    }
    res.agree_seconds = agree_watch.seconds();
    const Stopwatch send_watch;
    if (cfg.checkpoint.broadcast_restore && dp && dp->size() > 1) send_to_group(*dp, model, state);
    res.send_seconds = send_watch.seconds();
    for (int c = 0; c < model.num_chunks(); c++)
      model.load_chunk_state(c, state[3 * c].data(), state[3 * c + 1].data(), state[3 * c + 2].data(), m.step);
    res.restored = true;
    res.path = st->describe() + "/" + dir;
    res.manifest = std::move(m);
    res.files_read = rd.files_read();
    res.bytes_read = rd.bytes_read();
    res.files = rd.file_names();
    res.seconds = watch.seconds();
    return res;
  }
}

}  // namespace ms
