// manifest: what a checkpoint holds, written last (ckpt/checkpointer.h) and read first (restore.h).
// A checkpoint is one folder per step: one safetensors file per rank (the state runs that rank owns,
// ParallelModel::state_runs) plus manifest.json: format version, step, the trainer and data state, the
// resolved config, a hash of the model config, every tensor's whole shape and split, and for every
// file its size, its xxHash64 and each entry's place (tensor, kind, TP part, element range of the
// part). The place is layout-independent, so a checkpoint loads under any DP x TP x PP layout.
// parse_manifest() trusts nothing: every field is checked and every error names the file and field.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"        // Config, ModelConfig
#include "data/dataloader.h"      // DataLoader::Position

namespace ms {

constexpr int kCheckpointFormatVersion = 1;

// The three arrays saved per tensor element.
enum class StateKind : uint8_t { kParam, kMoment1, kMoment2 };
const char* state_kind_name(StateKind k);  // "param", "exp_avg", "exp_avg_sq"
inline constexpr StateKind kStateKinds[] = {StateKind::kParam, StateKind::kMoment1, StateKind::kMoment2};

// The name the head stage's copy of the tied token embedding is saved under (pipeline > 1). A model
// with an untied LM head has a tensor of that name of its own (and no copy): the config tells them apart.
inline constexpr const char* kHeadCopyName = "lm_head.weight";

// One tensor in a file: elements [lo, hi) of TP part `part` of `parts` of `tensor`'s `kind` array.
struct ManifestEntry {
  std::string key;     // its name inside the safetensors file
  std::string tensor;  // whole-model name (param_layout.h's Hugging Face names; kHeadCopyName for the head copy)
  StateKind kind = StateKind::kParam;
  int parts = 1, part = 0;
  uint64_t lo = 0, hi = 0;
};

struct ManifestFile {
  std::string name;  // file name inside the checkpoint folder
  int rank = 0;      // the writer's world rank and grid coordinates
  int dp = 0, tp = 0, pp = 0;
  uint64_t bytes = 0;
  std::string xxh64;  // 16 hex digits of XXH64(seed 0) over the whole file
  std::vector<ManifestEntry> entries;
};

struct ManifestTensor {
  std::vector<int64_t> shape;  // the whole tensor's shape
  std::string split;           // how TP cuts it: "replicated", "rows", "cols", "qkv_rows"
};

// What orders the training stream: a resume continues at the saved sample index only in the same
// stream. Absent (present = false) in checkpoints written before issue 22.
struct ManifestDataStream {
  bool present = false;
  std::string files;              // XXH64 over the data.train files' names, sizes and meta.json checksums
  int64_t seed = 0;               // train.seed
  int64_t seq_len = 0;            // train.seq_len
  int64_t samples_per_step = 0;   // sequences per optimizer step over all ranks
  bool shuffle = true;            // data.shuffle
};

struct Manifest {
  int format_version = kCheckpointFormatVersion;
  int step = 0;                       // optimizer steps taken when saved
  DataLoader::Position data;          // the training stream's position for step + 1
  uint64_t tokens = 0;                // training tokens consumed so far (whole job)
  double loss = 0;                    // the training loss of step `step`
  std::string model_hash;             // model_config_hash() of the run that saved it
  std::map<std::string, std::string> model;  // the model section, key -> value text (for diffs)
  std::string config_toml;            // the resolved config of the run that saved it
  int dp = 1, tp = 1, pp = 1, virtual_stages = 1;
  std::map<std::string, ManifestTensor> tensors;
  std::vector<ManifestFile> files;
  // The run's lineage (16 hex digits): picked by a fresh start, kept by every resume; retention
  // removes only checkpoints of its own lineage. Empty in checkpoints written before issue 22.
  std::string lineage;
  ManifestDataStream data_stream;
};

// Hash of the [model] section (16 hex digits): checkpoints of another model shape are refused.
std::string model_config_hash(const ModelConfig& m);
std::map<std::string, std::string> model_fields(const Config& c);  // "n_layer" -> "12", ...

std::string manifest_to_json(const Manifest& m);
// `where` names the source (a path) in errors. Rejects a newer format version, missing or
// mistyped fields, entries outside their tensor, files listed twice.
Manifest parse_manifest(const std::string& text, const std::string& where);
// A rank's file records (the marker its writer leaves for rank 0) as a JSON array and back.
std::string manifest_files_to_json(const std::vector<ManifestFile>& files);
std::vector<ManifestFile> parse_manifest_files(const std::string& text, const std::string& where);
// Empty if the checkpoint's model equals cfg's; else "model.n_layer: checkpoint 4, config 2; ...".
std::string model_difference(const Manifest& m, const Config& cfg);
// The lineage of a manifest's text without checking the rest ("" if absent or not a manifest).
std::string manifest_lineage(const std::string& text);
// Empty if the two streams are the same; else what differs ("train.seed: checkpoint 1, run 7; ...").
// A checkpoint without a recorded stream gives "" too.
std::string data_stream_difference(const ManifestDataStream& saved, const ManifestDataStream& run);
// Every element of every (tensor, kind) covered exactly once by the entries; else the reason.
std::string coverage_problem(const Manifest& m);
// Empty if the manifest's tensors are exactly `model`'s, both ways: every tensor of the model is
// listed with its whole shape, and nothing else is (but kHeadCopyName, with the token embedding's
// shape); else every difference ("tensor 'x': checkpoint [65536], model [64]; ..."). With
// coverage_problem() empty too, every entry fits inside the model's own tensor, so a restore may
// copy the entries into model-sized buffers.
std::string tensor_difference(const Manifest& m, const ModelConfig& model);

}  // namespace ms
