// data_config: the [data] section of the config tree: where the tokens come from.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD

namespace ms {

#define MS_DATA_FIELDS(X)                                                                          \
  X(std::string, train, "", "training shards: a file, a directory or a glob (llm.c .bin shards or Megatron .bin/.idx prefixes)") \
  X(std::string, val, "", "validation shards (same forms as data.train); empty = no validation")   \
  X(bool, shuffle, true, "shuffle training samples (order is a pure function of seed, epoch, index)") \
  X(float, loader_timeout_s, 60.0f, "a rank waiting on the machine's shared data loader for longer than this (seconds) stops with an error naming the loader") \
  X(std::string, tokenizer_dir, "", "folder with GPT-2's encoder.json and vocab.bpe (empty = the one setup installs)")

struct DataConfig {
  MS_DATA_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
