// safetensors: reader and writer of the safetensors format (8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then raw bytes),
// for F32, F16, BF16, I32 and F64 tensors (element types are base/dtype.h's DType; the header spells them
// with safetensors_dtype()). Files are written to a temporary name and renamed, so a reader never
// sees a half-written file. Reading trusts nothing (checkpoints are read back): the header must be
// a JSON object of at most 100 MB without duplicate names, each entry's fields of the right type,
// shapes non-negative without overflow, each tensor's offsets holding exactly its bytes, and the
// tensors must tile the data section (no overlap, no hole, nothing after the last); every error
// names the file and the tensor.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/atomic_file.h"  // ByteRange
#include "base/dtype.h"  // DType
#include "base/mapped_file.h"  // MappedFile

namespace ms {

struct StTensor {
  DType dtype = DType::kF32;  // kF32, kF16, kBF16, kI32 or kF64
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes; // raw little-endian data
  size_t numel() const;
  size_t elem_size() const { return dtype_size(dtype); }
  // Any dtype as doubles (for comparisons in tests and tools).
  std::vector<double> to_f64() const;
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
  const int32_t* i32() const { return reinterpret_cast<const int32_t*>(bytes.data()); }
};

struct StFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;
  const StTensor& at(const std::string& name) const;  // error names the tensor if absent
};

StTensor st_f32(std::vector<int64_t> shape, const float* data);
// Element i of a floating-point tensor's raw data (F32, F64, F16 or BF16; exact but F64's rounding).
float float_element(DType dtype, const uint8_t* data, size_t i);
// All numel elements of such data as floats.
std::vector<float> to_f32(DType dtype, const uint8_t* data, size_t numel);
StTensor st_i32(std::vector<int64_t> shape, const int32_t* data);

// Writes tensors in name order (deterministic file bytes).
void save_safetensors(const std::string& path, const StFile& file);
StFile load_safetensors(const std::string& path);

// A tensor to be written from memory the caller keeps alive (checkpoint snapshots).
struct StView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype_size bytes
};
// The bytes of a safetensors file holding `views` (in name order) as ranges to write back to back:
// the 8-byte header length and the padded JSON header (kept in `storage`), then each tensor's data.
std::vector<ByteRange> safetensors_parts(std::vector<StView> views, const std::map<std::string, std::string>& metadata,
                                         std::string& storage);

// A safetensors file mapped read-only and checked exactly as load_safetensors checks it; the
// tensors point into the mapping (no copy). Move-only.
struct StMappedTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
};
class StMapped {
 public:
  explicit StMapped(const std::string& path) : StMapped(MappedFile(path)) {}
  explicit StMapped(MappedFile file);  // an already mapped file (errors name file.path())
  const StMappedTensor& at(const std::string& name) const;  // error names the file and tensor if absent
  const std::map<std::string, StMappedTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const MappedFile& file() const { return file_; }

 private:
  MappedFile file_;
  std::map<std::string, StMappedTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ms
