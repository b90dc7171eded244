// config: the one configuration tree of megascale (ModelConfig, OptimConfig, DataConfig,
// TrainConfig, ParallelConfig; one header per section). Every field is declared exactly once, with
// its default and its documentation, in the sections' X-macro lists; TOML loading, `--section.key=value` overrides, `--help`, the resolved
// config dump and validation are all generated from those lists, so they cannot drift apart.
// Guarantees: unknown keys, wrong types and impossible values are rejected by `validate()` /
// `load_config()` with an ms::Error naming the file (or "command line"), the key and the reason,
// before any work starts.
#pragma once
#include <string>
#include <utility>  // std::pair
#include <vector>

#include "config/checkpoint_config.h"  // CheckpointConfig, SaveFailurePolicy
#include "config/data_config.h"      // DataConfig
#include "config/model_config.h"     // ModelConfig, BlockKind, AttentionKind
#include "config/obs_config.h"       // ObsConfig
#include "config/optim_config.h"     // OptimConfig, OptimizerKind
#include "config/parallel_config.h"  // ParallelConfig, BackendChoice
#include "config/train_config.h"     // TrainConfig, ProgressMode

namespace ms {

// X(type, name, default, doc)
struct Config {
  ModelConfig model;
  OptimConfig optim;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  ObsConfig obs;

  // Rejects impossible values; the error names the key and the reason. Runs each section's
  // validate() (its own fields), then the checks across sections (seq_len vs max_seq_len, the
  // tensor-parallel split, layers per pipeline chunk, batch products). Every entry point calls it
  // before anything computes with the values (resolve_layout calls it first itself).
  void validate() const;
  // Fits the layout to world_size ranks, before any rank starts work: validate(), then resolves
  // parallel.dp = 0, rejects tp * dp * pp != world_size, and derives train.grad_accum from
  // train.global_batch (which must be a multiple of dp * batch_size). Products are range-checked.
  // Errors name the keys and the numbers.
  void resolve_layout(int world_size);
};

// One field of the tree, for help text and generic visitation.
struct FieldInfo {
  std::string key;    // "model.n_layer"
  std::string type;   // "int", "float", "bool", "string", "choice"
  std::string value;  // current value as text
  std::string doc;
  std::vector<std::string> choices;  // "choice" fields: the allowed values
};
std::vector<FieldInfo> list_fields(const Config& c);

// Sets one field from text ("--model.n_layer=4" style); errors name `where` and the key. A field
// alone: model.preset sets itself, not the family fields (apply_overrides does that).
void set_field(Config& c, const std::string& key, const std::string& value, const std::string& where);
// One source's overrides (the command line): model.preset first, with its family defaults
// (ModelConfig::apply_preset), then every other key in order, so explicit keys override the preset.
void apply_overrides(Config& c, const std::vector<std::pair<std::string, std::string>>& key_values,
                     const std::string& where);

// Loads a TOML file over `c` (sections [model], [optim], [data], [train]); unknown keys and wrong
// types are errors naming the file and key.
void load_toml(Config& c, const std::string& path);
// The same from TOML text (a checkpoint's saved config); `where` names it in errors.
void load_toml_text(Config& c, const std::string& text, const std::string& where);

// The resolved config as TOML text (round-trips through load_toml) and as JSON text.
std::string to_toml(const Config& c);
std::string to_json(const Config& c);

}  // namespace ms
