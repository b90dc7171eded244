// megatron_dataset: MMIDIDX reader (mapped, validated up front) and writer.
#include "data/megatron_dataset.h"

#include <cstring>   // std::memcpy, std::memcmp
#include <limits>    // std::numeric_limits
#include <optional>  // std::optional

#include <fmt/format.h>

#include "base/atomic_file.h"  // write_file_atomic
#include "base/check.h"

namespace ms {

namespace {

constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr size_t kIdxHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The element types a token id can be stored in (Megatron codes 1..5 and 8; not the floats).
bool holds_token_ids(DType t) {
  switch (t) {
    case DType::kU8: case DType::kI8: case DType::kI16: case DType::kU16: case DType::kI32: case DType::kI64:
      return true;
    default:
      return false;
  }
}

// "fp32 (Megatron code 7)": a dtype as both spellings, for messages.
std::string describe(DType t) { return fmt::format("{} (Megatron code {})", dtype_name(t), megatron_dtype_code(t)); }

std::string strip_extension(const std::string& p) {
  auto ends = [&](const char* e) { return p.size() >= 4 && p.compare(p.size() - 4, 4, e) == 0; };
  return (ends(".bin") || ends(".idx")) ? p.substr(0, p.size() - 4) : p;
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

MegatronDataset::MegatronDataset(const std::string& prefix) : prefix_(strip_extension(prefix)) {
  idx_ = MappedFile(idx_path());
  bin_ = MappedFile(bin_path());
  check_structure();
}

void MegatronDataset::check_structure() {
  const std::string ip = idx_path(), bp = bin_path();
  const uint8_t* p = idx_.data();
  const size_t isz = idx_.size();
  MS_CHECK(isz >= kIdxHeaderBytes, "{}: truncated: {} bytes, less than the {}-byte MMIDIDX header",
           ip, isz, kIdxHeaderBytes);
  MS_CHECK(std::memcmp(p, kIdxMagic, 9) == 0,
           "{}: bad magic (expected \"MMIDIDX\\x00\\x00\" — is this a Megatron-LM .idx file?)", ip);
  uint64_t version = load<uint64_t>(p + 9);
  MS_CHECK(version == 1, "{}: unsupported version {} (expected 1)", ip, version);
  const uint8_t code = p[17];
  const std::optional<DType> dtype = dtype_from_megatron_code(code);
  MS_CHECK(dtype.has_value(), "{}: unknown dtype code {} (expected 1..8)", ip, code);
  dtype_ = *dtype;
  MS_CHECK(holds_token_ids(dtype_), "{}: dtype {} cannot hold token ids", ip, describe(dtype_));
  item_ = dtype_size(dtype_);
  num_seq_ = load<uint64_t>(p + 18);
  num_doc_idx_ = load<uint64_t>(p + 26);
  // Size check without overflow: bound the counts by the file size first.
  MS_CHECK(num_seq_ <= isz / 12 && num_doc_idx_ <= isz / 8,
           "{}: size mismatch: header says {} sequences and {} document indices, impossible in a "
           "{}-byte file", ip, num_seq_, num_doc_idx_, isz);
  uint64_t expect = kIdxHeaderBytes + 12 * num_seq_ + 8 * num_doc_idx_;
  MS_CHECK(isz == expect || isz == expect + num_seq_,
           "{}: size mismatch: header says {} sequences and {} document indices ({} bytes, or {} "
           "with sequence modes) but file has {} bytes", ip, num_seq_, num_doc_idx_, expect,
           expect + num_seq_, isz);
  MS_CHECK(num_doc_idx_ >= 1, "{}: document index is empty (expected at least the leading 0)", ip);
  lengths_ = p + kIdxHeaderBytes;
  pointers_ = lengths_ + 4 * num_seq_;
  doc_idx_ = pointers_ + 8 * num_seq_;

  // Sequences: non-negative lengths, inside the .bin, back to back from byte 0.
  const uint64_t bsz = bin_.size();
  uint64_t running = 0;
  for (uint64_t i = 0; i < num_seq_; ++i) {
    int32_t len = load<int32_t>(lengths_ + 4 * i);
    int64_t ptr = load<int64_t>(pointers_ + 8 * i);
    MS_CHECK(len >= 0, "{}: sequence {} has negative length {}", ip, i, len);
    MS_CHECK(ptr >= 0 && static_cast<uint64_t>(ptr) <= bsz &&
                 static_cast<uint64_t>(len) * item_ <= bsz - static_cast<uint64_t>(ptr),
             "{}: sequence {} (pointer {}, {} tokens of {}) runs past the end of {} ({} bytes){}", ip,
             i, ptr, len, dtype_name(dtype_), bp, bsz,
             static_cast<uint64_t>(ptr) == running ? " — is the .bin truncated?" : "");
    MS_CHECK(static_cast<uint64_t>(ptr) == running,
             "{}: sequence {} pointer {} is not the end of the previous sequence ({})", ip, i, ptr,
             running);
    running += static_cast<uint64_t>(len) * item_;
  }
  MS_CHECK(running == bsz, "{}: size mismatch: {} sequences in {} hold {} bytes but file has {} bytes",
           bp, num_seq_, ip, running, bsz);
  num_tokens_ = running / item_;

  // Document indices: start at 0, non-decreasing, end at N.
  int64_t prev = 0;
  for (uint64_t d = 0; d < num_doc_idx_; ++d) {
    int64_t v = load<int64_t>(doc_idx_ + 8 * d);
    if (d == 0) MS_CHECK(v == 0, "{}: document index 0 is {} (expected 0)", ip, v);
    MS_CHECK(v >= prev, "{}: document indices not monotonic: index {} is {} after {}", ip, d, v, prev);
    MS_CHECK(static_cast<uint64_t>(v) <= num_seq_,
             "{}: document index {} is {} > sequence count {}", ip, d, v, num_seq_);
    prev = v;
  }
  MS_CHECK(static_cast<uint64_t>(prev) == num_seq_,
           "{}: last document index is {} but there are {} sequences", ip, prev, num_seq_);
}

int64_t MegatronDataset::token_at(uint64_t i) const {
  const uint8_t* q = bin_.data() + i * item_;
  switch (dtype_) {
    case DType::kU8: return *q;
    case DType::kI8: return static_cast<int8_t>(*q);
    case DType::kI16: return load<int16_t>(q);
    case DType::kU16: return load<uint16_t>(q);
    case DType::kI32: return load<int32_t>(q);
    case DType::kI64: return load<int64_t>(q);
    default: MS_FAIL("{}: dtype {} cannot hold token ids", bin_path(), describe(dtype_));
  }
}

namespace {
// Min/max over n elements of type T at p (fast path of validate()).
template <typename T>
void minmax(const uint8_t* p, uint64_t n, int64_t& lo, int64_t& hi) {
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::lowest();
  for (uint64_t i = 0; i < n; ++i) {
    T v = load<T>(p + i * sizeof(T));
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  lo = n ? static_cast<int64_t>(mn) : 0;
  hi = n ? static_cast<int64_t>(mx) : 0;
}
}  // namespace

void MegatronDataset::validate(int vocab_size) const {
  // Structure was checked by the constructor (the mapping is private and read-only).
  int64_t lo = 0, hi = 0;
  const uint8_t* b = bin_.data();
  switch (dtype_) {
    case DType::kU8: minmax<uint8_t>(b, num_tokens_, lo, hi); break;
    case DType::kI8: minmax<int8_t>(b, num_tokens_, lo, hi); break;
    case DType::kI16: minmax<int16_t>(b, num_tokens_, lo, hi); break;
    case DType::kU16: minmax<uint16_t>(b, num_tokens_, lo, hi); break;
    case DType::kI32: minmax<int32_t>(b, num_tokens_, lo, hi); break;
    case DType::kI64: minmax<int64_t>(b, num_tokens_, lo, hi); break;
    default: break;
  }
  if (lo >= 0 && hi < vocab_size) return;
  // Locate the first offender and name its sequence.
  uint64_t seq = 0, seq_start = 0;
  for (uint64_t i = 0; i < num_tokens_; ++i) {
    while (seq < num_seq_ && i >= seq_start + static_cast<uint64_t>(sequence_length(seq)))
      seq_start += static_cast<uint64_t>(sequence_length(seq++));
    int64_t v = token_at(i);
    MS_CHECK(v >= 0 && v < vocab_size,
             "{}: token id {} at position {} (sequence {}, offset {}) {}", bin_path(), v, i, seq,
             i - seq_start,
             v < 0 ? std::string("is negative") : fmt::format(">= vocab size {}", vocab_size));
  }
}

int32_t MegatronDataset::sequence_length(uint64_t i) const {
  MS_CHECK(i < num_seq_, "{}: sequence {} out of range ({} sequences)", idx_path(), i, num_seq_);
  return load<int32_t>(lengths_ + 4 * i);
}

int64_t MegatronDataset::sequence_pointer(uint64_t i) const {
  MS_CHECK(i < num_seq_, "{}: sequence {} out of range ({} sequences)", idx_path(), i, num_seq_);
  return load<int64_t>(pointers_ + 8 * i);
}

int64_t MegatronDataset::document_index(uint64_t i) const {
  MS_CHECK(i < num_doc_idx_, "{}: document index {} out of range ({})", idx_path(), i, num_doc_idx_);
  return load<int64_t>(doc_idx_ + 8 * i);
}

std::vector<int64_t> MegatronDataset::sequence(uint64_t i) const {
  uint64_t first = static_cast<uint64_t>(sequence_pointer(i)) / item_;
  std::vector<int64_t> out(static_cast<size_t>(sequence_length(i)));
  for (size_t k = 0; k < out.size(); ++k) out[k] = token_at(first + k);
  return out;
}

std::vector<int64_t> MegatronDataset::document(uint64_t d) const {
  MS_CHECK(d < num_documents(), "{}: document {} out of range ({} documents)", idx_path(), d,
           num_documents());
  std::vector<int64_t> out;
  for (int64_t s = document_index(d); s < document_index(d + 1); ++s) {
    std::vector<int64_t> q = sequence(static_cast<uint64_t>(s));
    out.insert(out.end(), q.begin(), q.end());
  }
  return out;
}

void MegatronDataset::read_tokens(uint64_t offset, size_t count, int* out) const {
  MS_CHECK(offset <= num_tokens_ && count <= num_tokens_ - offset,
           "{}: read of tokens [{}, {}) past the end ({} tokens)", bin_path(), offset,
           offset + count, num_tokens_);
  const uint8_t* b = bin_.data();
  switch (dtype_) {
    case DType::kU16:
      for (size_t k = 0; k < count; ++k) out[k] = load<uint16_t>(b + 2 * (offset + k));
      break;
    case DType::kI32:
      for (size_t k = 0; k < count; ++k) out[k] = load<int32_t>(b + 4 * (offset + k));
      break;
    default:
      for (size_t k = 0; k < count; ++k) out[k] = static_cast<int>(token_at(offset + k));
  }
}

// ---------------------------------------------------------------------------------------------
// Writer

MegatronWriter::MegatronWriter(std::string prefix, DType dtype) : prefix_(strip_extension(prefix)), dtype_(dtype) {
  MS_CHECK(holds_token_ids(dtype), "{}: dtype {} cannot hold token ids", prefix_, describe(dtype));
}

void MegatronWriter::add_sequence(const std::vector<int64_t>& tokens) {
  MS_CHECK(!finalized_, "{}: add_sequence after finalize", prefix_);
  MS_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
           "{}: sequence of {} tokens exceeds int32 lengths", prefix_, tokens.size());
  auto put = [&](auto v, int64_t orig) {
    using T = decltype(v);
    MS_CHECK(static_cast<int64_t>(v) == orig, "{}: token {} does not fit dtype {}", prefix_, orig,
             dtype_name(dtype_));
    size_t at = bin_.size();
    bin_.resize(at + sizeof(T));
    std::memcpy(bin_.data() + at, &v, sizeof(T));
  };
  for (int64_t t : tokens) {
    switch (dtype_) {
      case DType::kU8: put(static_cast<uint8_t>(t), t); break;
      case DType::kI8: put(static_cast<int8_t>(t), t); break;
      case DType::kI16: put(static_cast<int16_t>(t), t); break;
      case DType::kU16: put(static_cast<uint16_t>(t), t); break;
      case DType::kI32: put(static_cast<int32_t>(t), t); break;
      case DType::kI64: put(static_cast<int64_t>(t), t); break;
      default: MS_FAIL("{}: dtype {} cannot hold token ids", prefix_, describe(dtype_));
    }
  }
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void MegatronWriter::end_document() {
  MS_CHECK(!finalized_, "{}: end_document after finalize", prefix_);
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
}

void MegatronWriter::finalize() {
  MS_CHECK(!finalized_, "{}: finalize called twice", prefix_);
  finalized_ = true;
  std::vector<uint8_t> idx;
  auto put = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    idx.insert(idx.end(), b, b + n);
  };
  uint64_t version = 1, n = lengths_.size(), d = doc_idx_.size();
  uint8_t code = megatron_dtype_code(dtype_);
  put(kIdxMagic, 9);
  put(&version, 8);
  put(&code, 1);
  put(&n, 8);
  put(&d, 8);
  put(lengths_.data(), 4 * n);
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    put(&ptr, 8);
    ptr += static_cast<int64_t>(len) * static_cast<int64_t>(dtype_size(dtype_));
  }
  put(doc_idx_.data(), 8 * d);
  write_file_atomic(prefix_ + ".bin", {{bin_.data(), bin_.size()}});
  write_file_atomic(prefix_ + ".idx", {{idx.data(), idx.size()}});
}

void write_megatron_dataset(const std::string& prefix,
                            const std::vector<std::vector<int64_t>>& documents, DType dtype) {
  MegatronWriter w(prefix, dtype);
  for (const auto& doc : documents) {
    w.add_sequence(doc);
    w.end_document();
  }
  w.finalize();
}

}  // namespace ms
