// prepare: turns a text corpus into llm.c token shards for training and validation.
// Documents are input files (directories are walked recursively, sorted by path); with format
// "brown" (or "auto" when most files look like word/tag lines; brown.h) each Brown corpus file is one
// document, files that do not look tagged (CONTENTS, README, cats.txt, ...) are skipped, tags are
// stripped at the last '/', `` and '' become ", and spacing is detokenized; with "text" a file's
// bytes are the document (must be valid UTF-8). Every document is encoded with GPT-2's BPE (or the
// byte-level BPE of a Hugging Face tokenizer.json: hf_tokenizer.h) and preceded by the tokenizer's
// document separator (GPT-2: the EOT token, llm.c convention; Llama 3: <|begin_of_text|>). Document i goes to validation when
// floor((i+1)*f) > floor(i*f) for f = val_fraction (evenly spread, ≈ f of the documents; at least
// one when f > 0), so train and validation never share a document. Output: out_dir/train_000000.bin
// ..., out_dir/val_000000.bin ..., each at most shard_tokens tokens (uint16 ids, or uint32 ids
// when the vocabulary has more than 65536 tokens: token_shard.h), and out_dir/meta.json (counts,
// shards, the tokenizer — kind, its folder or file with the file's xxHash64, vocab_size, the
// separator —, unigram entropy of the train tokens in bits and nats — a reference for the loss of
// a model that ignores context). Every file is written atomically
// (base/atomic_file.h: temporary file, fsync, rename), so a reader never sees a partial shard or
// meta.json. Progress lines go to stdout.
#pragma once
#include <cstddef>   // size_t
#include <memory>    // std::unique_ptr
#include <optional>  // std::optional
#include <string>
#include <vector>

#include "data/tokenizer.h"  // Tokenizer

namespace ms {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files or directories
  std::string out_dir;
  std::string format = "auto";      // "text" | "brown" | "auto" (brown if lines look like word/tag)
  double val_fraction = 0.05;       // in [0, 1); 0 = no validation split
  size_t shard_tokens = 100'000'000;  // tokens per shard file (the last one holds the rest)
  std::string tokenizer_dir;        // folder with encoder.json and vocab.bpe (when no tokenizer_file)
  std::string tokenizer_file;       // a Hugging Face tokenizer.json (or its folder); wins over tokenizer_dir
  std::string bos_token;            // the document separator's text ("" = the tokenizer's own: hf_tokenizer.h)
  bool verbose = true;              // progress lines on stdout
};

struct PrepareResult {
  size_t train_tokens = 0, val_tokens = 0;  // including one separator per document
  std::vector<std::string> train_shards, val_shards;
  std::vector<std::string> train_documents, val_documents;  // input file paths
  std::string format;                                        // "text" or "brown" as resolved
  double unigram_entropy_bits = 0;  // of the train tokens, bits per token
  double unigram_entropy_nats = 0;  // the same in nats (compare with a cross-entropy loss)
};

PrepareResult run_prepare(const PrepareOptions& opt);

// What a meta.json written by run_prepare says about the tokenizer of the shards beside it, so
// training can check its vocabulary size and decode samples with the same tokenizer.
struct PreparedTokenizer {
  std::string kind;            // "gpt2" (GPT-2's tables) or "hf-bpe" (a tokenizer.json)
  std::string location;        // the tables' folder (gpt2) or the tokenizer.json (hf-bpe)
  int vocab_size = 0;
  int separator = -1;          // the id before every document
  std::string separator_text;  // its text ("" in a meta.json older than the field)
};

// Reads `meta_path`; std::nullopt when the file does not exist or names no tokenizer (shards
// written elsewhere). Malformed JSON or fields of the wrong type are an ms::Error naming the file.
std::optional<PreparedTokenizer> read_prepared_tokenizer(const std::string& meta_path);

// Loads that tokenizer: the tokenizer.json with the same separator, or GPT-2's tables from
// `location` (gpt2_dir when the meta.json recorded none). The vocabulary size must equal the one
// recorded (else an ms::Error: the file changed since prepare).
std::unique_ptr<Tokenizer> load_prepared_tokenizer(const PreparedTokenizer& t, const std::string& gpt2_dir);

}  // namespace ms
