// megatron_dataset: reader and writer of Megatron-LM indexed datasets (`prefix.bin` + `prefix.idx`,
// the MMIDIDX format of megatron/core/datasets/indexed_dataset.py).
//   .idx (little-endian): magic "MMIDIDX\0\0" (9 bytes), version uint64 = 1, dtype code uint8
//        (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16; converted
//        to and from ms::DType by base/dtype.h),
//        sequence count N uint64, document-index count D uint64, lengths int32[N],
//        byte pointers int64[N], document indices int64[D] (0, then the running sequence count at
//        the end of each document), optionally int8[N] sequence modes (multimodal; ignored here).
//   .bin: the tokens of every sequence back to back, in the dtype of the .idx, no header.
// MegatronDataset maps both files; its constructor rejects any structural problem (magic, version,
// dtype, .idx size, negative lengths, pointers that are not the running sum or run past the .bin,
// trailing .bin bytes, malformed document indices) and validate(V) also rejects token ids outside
// [0, V). Errors are ms::Errors naming the file and the reason. The dataset's token stream is the
// concatenation of its sequences, i.e. the whole .bin.
#pragma once
#include <cstddef>  // size_t
#include <cstdint>  // int64_t, uint64_t, uint8_t
#include <string>
#include <vector>

#include "base/dtype.h"        // DType, dtype_from_megatron_code, megatron_dtype_code
#include "data/token_shard.h"  // MappedFile

namespace ms {

class MegatronDataset {
 public:
  // `prefix` without extension (a trailing ".bin" or ".idx" is stripped). Maps and checks structure.
  explicit MegatronDataset(const std::string& prefix);

  // Every token id in [0, vocab_size); names the first bad token.
  void validate(int vocab_size) const;

  const std::string& prefix() const { return prefix_; }
  std::string bin_path() const { return prefix_ + ".bin"; }
  std::string idx_path() const { return prefix_ + ".idx"; }
  DType dtype() const { return dtype_; }  // an integer type (kU8, kI8, kI16, kU16, kI32, kI64)
  uint64_t num_sequences() const { return num_seq_; }
  uint64_t num_documents() const { return num_doc_idx_ - 1; }
  uint64_t num_tokens() const { return num_tokens_; }

  int32_t sequence_length(uint64_t i) const;
  int64_t sequence_pointer(uint64_t i) const;
  int64_t document_index(uint64_t i) const;  // i in [0, num_documents()]
  std::vector<int64_t> sequence(uint64_t i) const;
  std::vector<int64_t> document(uint64_t d) const;  // all sequences of document d, concatenated

  // Copies tokens [offset, offset+count) of the token stream into out (as int). Bounds-checked.
  void read_tokens(uint64_t offset, size_t count, int* out) const;

 private:
  void check_structure();
  int64_t token_at(uint64_t i) const;
  std::string prefix_;
  MappedFile idx_, bin_;
  DType dtype_ = DType::kU16;
  size_t item_ = 2;
  uint64_t num_seq_ = 0, num_doc_idx_ = 0, num_tokens_ = 0;
  const uint8_t* lengths_ = nullptr;   // int32[N] (unaligned access via memcpy)
  const uint8_t* pointers_ = nullptr;  // int64[N]
  const uint8_t* doc_idx_ = nullptr;   // int64[D]
};

// Builds a dataset like Megatron's IndexedDatasetBuilder: add_sequence() appends one sequence,
// end_document() closes the current document; finalize() writes prefix.bin and prefix.idx
// (each via a temporary file + rename). Token values must fit the dtype (checked).
class MegatronWriter {
 public:
  // dtype: an integer type (others are an ms::Error: they cannot hold token ids).
  MegatronWriter(std::string prefix, DType dtype = DType::kU16);
  void add_sequence(const std::vector<int64_t>& tokens);
  void end_document();
  void finalize();

 private:
  std::string prefix_;
  DType dtype_;
  std::vector<uint8_t> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_{0};
  bool finalized_ = false;
};

// Convenience: one sequence per document.
void write_megatron_dataset(const std::string& prefix, const std::vector<std::vector<int64_t>>& documents,
                            DType dtype = DType::kU16);

}  // namespace ms
