// prepare: turns a text corpus into llm.c token shards for training and validation.
// Documents are input files (directories are walked recursively, sorted by path); with format
// "brown" (or "auto" when most files look like word/tag lines; brown.h) each Brown corpus file is one
// document, files that do not look tagged (CONTENTS, README, cats.txt, ...) are skipped, tags are
// stripped at the last '/', `` and '' become ", and spacing is detokenized; with "text" a file's
// bytes are the document (must be valid UTF-8). Every document is encoded with GPT-2's BPE and
// preceded by the EOT token (llm.c convention). Document i goes to validation when
// floor((i+1)*f) > floor(i*f) for f = val_fraction (evenly spread, ≈ f of the documents; at least
// one when f > 0), so train and validation never share a document. Output: out_dir/train_000000.bin
// ..., out_dir/val_000000.bin ..., each at most shard_tokens tokens, and out_dir/meta.json
// (counts, shards, tokenizer, unigram entropy of the train tokens in bits and nats — a reference
// for the loss of a model that ignores context). Every file is written atomically
// (base/atomic_file.h: temporary file, fsync, rename), so a reader never sees a partial shard or
// meta.json. Progress lines go to stdout.
#pragma once
#include <cstddef>  // size_t
#include <string>
#include <vector>

namespace ms {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories
  std::string out_dir;
  std::string format = "auto";      // "text" | "brown" | "auto" (brown if lines look like word/tag)
  double val_fraction = 0.05;       // in [0, 1); 0 = no validation split
  size_t shard_tokens = 100'000'000;  // tokens per shard file (the last one holds the rest)
  std::string tokenizer_dir;        // folder with encoder.json and vocab.bpe (required)
  bool verbose = true;              // progress lines on stdout
};

struct PrepareResult {
  size_t train_tokens = 0, val_tokens = 0;  // including one EOT per document
  std::vector<std::string> train_shards, val_shards;
  std::vector<std::string> train_documents, val_documents;  // input file paths
  std::string format;                                        // "text" or "brown" as resolved
  double unigram_entropy_bits = 0;  // of the train tokens, bits per token
  double unigram_entropy_nats = 0;  // the same in nats (compare with a cross-entropy loss)
};

PrepareResult run_prepare(const PrepareOptions& opt);

}  // namespace ms
