// prepare: turns a text corpus into llm.c token shards for training and validation.
// Documents are input files (directories are walked recursively, sorted by path); with format
// "brown" (or "auto" when most files look like word/tag lines) each Brown corpus file is one
// document, files that do not look tagged (CONTENTS, README, cats.txt, ...) are skipped, tags are
// stripped at the last '/', `` and '' become ", and spacing is detokenized; with "text" a file's
// bytes are the document (must be valid UTF-8). Every document is encoded with GPT-2's BPE and
// preceded by the EOT token (llm.c convention). Document i goes to validation when
// floor((i+1)*f) > floor(i*f) for f = val_fraction (evenly spread, ≈ f of the documents; at least
// one when f > 0), so train and validation never share a document. Output: out_dir/train_000000.bin
// ..., out_dir/val_000000.bin ..., each at most shard_tokens tokens, and out_dir/meta.json
// (counts, shards, tokenizer, unigram entropy of the train tokens in bits and nats — a reference
// for the loss of a model that ignores context). Progress lines go to stdout.
#pragma once
#include <cstddef>  // size_t
#include <string>
#include <string_view>
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

// Brown corpus file text ("word/tag word/tag ...", sentences on lines, a leading tab opens a
// paragraph) -> plain text: tags stripped, `` and '' -> ", no space before , . ; : ? ! ) ] } %
// ' n't 's 'll ..., none after ( [ { $ and opening quotes (lone ' quotes pair up within a line),
// `` / '' inside words (inch marks) also become ", a '.' right after an abbreviation's '.' is
// dropped, paragraphs separated by a blank line, headlines (all tags *-hl) on their own
// paragraph. Ends with one '\n' (empty input -> "").
std::string brown_detokenize(std::string_view file_text);

// True when the text's first non-empty lines are mostly "word/tag" tokens (Brown form C).
bool looks_like_brown(std::string_view file_text);

}  // namespace ms
