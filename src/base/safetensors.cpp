// safetensors.cpp: see safetensors.h.
#include "base/safetensors.h"

#include <optional>

#include <bit>      // std::bit_cast
#include <cstring>  // std::memcpy
#include <algorithm>  // std::sort
#include <fstream>    // std::ifstream, std::ofstream
#include <set>        // std::set
#include <filesystem>

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/atomic_file.h"  // write_file_atomic
#include "base/check.h"        // MS_CHECK

namespace ms {

namespace {
bool supported(DType t) {
  return t == DType::kF32 || t == DType::kI32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}
}  // namespace

float float_element(DType dtype, const uint8_t* data, size_t i) {
  switch (dtype) {
    case DType::kF32: { float v; std::memcpy(&v, data + 4 * i, 4); return v; }
    case DType::kF64: { double v; std::memcpy(&v, data + 8 * i, 8); return static_cast<float>(v); }
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return static_cast<float>(std::bit_cast<_Float16>(h));  // exact: every half is a float
    }
    default: MS_FAIL("safetensors: dtype {} is not a floating-point type", safetensors_dtype(dtype));
  }
}

std::vector<float> to_f32(DType dtype, const uint8_t* data, size_t numel) {
  std::vector<float> out(numel);
  for (size_t i = 0; i < numel; i++) out[i] = float_element(dtype, data, i);
  return out;
}

size_t StTensor::numel() const {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<double> StTensor::to_f64() const {
  std::vector<double> out(numel());
  for (size_t i = 0; i < out.size(); i++) {
    if (dtype == DType::kI32) out[i] = i32()[i];
    else if (dtype == DType::kF64) out[i] = reinterpret_cast<const double*>(bytes.data())[i];
    else out[i] = float_element(dtype, bytes.data(), i);
  }
  return out;
}

const StTensor& StFile::at(const std::string& name) const {
  auto it = tensors.find(name);
  MS_CHECK(it != tensors.end(), "safetensors: no tensor named '{}'", name);
  return it->second;
}

static StTensor make(DType dtype, std::vector<int64_t> shape, const void* data) {
  StTensor t{dtype, std::move(shape), {}};
  t.bytes.resize(t.numel() * 4);
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}
StTensor st_f32(std::vector<int64_t> shape, const float* data) { return make(DType::kF32, std::move(shape), data); }
StTensor st_i32(std::vector<int64_t> shape, const int32_t* data) { return make(DType::kI32, std::move(shape), data); }

std::vector<ByteRange> safetensors_parts(std::vector<StView> views, const std::map<std::string, std::string>& metadata,
                                         std::string& storage) {
  std::sort(views.begin(), views.end(), [](const StView& a, const StView& b) { return a.name < b.name; });
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  std::vector<size_t> bytes;
  for (const StView& t : views) {
    MS_CHECK(supported(t.dtype), "safetensors: tensor '{}': unsupported dtype {}", t.name, safetensors_dtype(t.dtype));
    MS_CHECK(!header.contains(t.name), "safetensors: tensor '{}' given twice", t.name);
    size_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    header[t.name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    bytes.push_back(n);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  const uint64_t n = h.size();
  storage.assign(reinterpret_cast<const char*>(&n), 8);
  storage += h;
  std::vector<ByteRange> parts = {{storage.data(), storage.size()}};
  for (size_t i = 0; i < views.size(); i++) parts.push_back({views[i].data, bytes[i]});
  return parts;
}

void save_safetensors(const std::string& path, const StFile& file) {
  std::vector<StView> views;
  for (const auto& [name, t] : file.tensors) {
    MS_CHECK(t.bytes.size() == t.numel() * t.elem_size(), "{}: tensor '{}': {} bytes for shape of {} elements", path, name, t.bytes.size(), t.numel());
    views.push_back({name, t.dtype, t.shape, t.bytes.data()});
  }
  std::string storage;
  std::vector<ByteRange> parts;
  try {
    parts = safetensors_parts(std::move(views), file.metadata, storage);
  } catch (const Error& e) {
    MS_FAIL("{}: {}", path, e.what());
  }
  write_file_atomic(path, parts);
}

namespace {
// The safetensors specification's limit on the JSON header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// What one header entry says, checked field by field (types first, then values).
struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v) {
  MS_CHECK(v.is_object(), "{}: tensor '{}': the header entry is not an object", path, name);
  Entry e;
  e.name = name;
  MS_CHECK(v.contains("dtype") && v["dtype"].is_string(), "{}: tensor '{}': 'dtype' is missing or not a string", path,
           name);
  const std::string dt = v["dtype"].get<std::string>();
  const std::optional<DType> d = dtype_from_safetensors(dt);
  MS_CHECK(d && supported(*d), "{}: tensor '{}': unsupported dtype {} (F32, F16, BF16, I32 or F64)", path, name, dt);
  e.dtype = *d;
  MS_CHECK(v.contains("shape") && v["shape"].is_array(), "{}: tensor '{}': 'shape' is missing or not an array", path,
           name);
  uint64_t numel = 1;
  for (const nlohmann::json& dim : v["shape"]) {
    MS_CHECK(dim.is_number_integer(), "{}: tensor '{}': shape entry {} is not an integer", path, name, dim.dump());
    const int64_t n = dim.get<int64_t>();
    MS_CHECK(n >= 0, "{}: tensor '{}': negative dimension {} in shape {}", path, name, n, v["shape"].dump());
    MS_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(n), &numel),
             "{}: tensor '{}': shape {} overflows the element count", path, name, v["shape"].dump());
    e.shape.push_back(n);
  }
  uint64_t bytes = 0;
  MS_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &bytes),
           "{}: tensor '{}': shape {} overflows the byte count", path, name, v["shape"].dump());
  const nlohmann::json& o = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
  MS_CHECK(o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned(),
           "{}: tensor '{}': 'data_offsets' is not a pair of non-negative integers", path, name);
  e.begin = o[0].get<uint64_t>(), e.end = o[1].get<uint64_t>();
  MS_CHECK(e.begin <= e.end && e.end - e.begin == bytes, "{}: tensor '{}': data offsets [{}, {}) do not hold the {} "
           "bytes of shape {}", path, name, e.begin, e.end, bytes, v["shape"].dump());
  return e;
}
}  // namespace

StMapped::StMapped(MappedFile file) : file_(std::move(file)) {
  const std::string& path = file_.path();
  const uint64_t size = file_.size();
  MS_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes)", path, size);
  uint64_t hlen = 0;
  std::memcpy(&hlen, file_.data(), 8);
  MS_CHECK(hlen <= kMaxHeaderBytes, "{}: header length {} exceeds the format's limit of {} bytes", path, hlen,
           kMaxHeaderBytes);
  MS_CHECK(hlen <= size - 8, "{}: header length {} exceeds the file size {}", path, hlen, size);
  const std::string h(reinterpret_cast<const char*>(file_.data()) + 8, hlen);
  // Duplicate names are an error (a JSON parser would keep the last one silently).
  std::set<std::string> seen;
  std::string duplicate;
  auto on_key = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h, on_key);
  } catch (const std::exception& e) {
    MS_FAIL("{}: bad safetensors JSON header: {}", path, e.what());
  }
  MS_CHECK(duplicate.empty(), "{}: tensor '{}' appears twice in the header", path, duplicate);
  MS_CHECK(header.is_object(), "{}: the safetensors header is not a JSON object", path);
  const uint64_t data_size = size - 8 - hlen;
  std::vector<Entry> entries;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      MS_CHECK(v.is_object(), "{}: '__metadata__' is not an object", path);
      for (auto& [k, mv] : v.items()) {
        MS_CHECK(mv.is_string(), "{}: metadata '{}' is not a string", path, k);
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, v));
    MS_CHECK(entries.back().end <= data_size, "{}: tensor '{}': data offsets [{}, {}) outside the {} data bytes", path,
             name, entries.back().begin, entries.back().end, data_size);
  }
  // The data must be covered exactly: in offset order every tensor starts where the previous ended
  // (no overlap, no hole), and the last one ends at the end of the file.
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (const Entry* e : order) {
    MS_CHECK(e->begin >= at, "{}: tensor '{}': data [{}, {}) overlaps the previous tensor's (ending at {})", path,
             e->name, e->begin, e->end, at);
    MS_CHECK(e->begin == at, "{}: tensor '{}': data starts at {}, leaving a hole after byte {}", path, e->name, e->begin,
             at);
    at = e->end;
  }
  MS_CHECK(at == data_size, "{}: {} data bytes after the last tensor's end ({}) belong to no tensor", path,
           data_size - at, at);
  const uint8_t* data = file_.data() + 8 + hlen;
  for (const Entry& e : entries) tensors_.emplace(e.name, StMappedTensor{e.dtype, e.shape, data + e.begin, e.end - e.begin});
}

const StMappedTensor& StMapped::at(const std::string& name) const {
  auto it = tensors_.find(name);
  MS_CHECK(it != tensors_.end(), "{}: no tensor named '{}'", file_.path(), name);
  return it->second;
}

StFile load_safetensors(const std::string& path) {
  const StMapped m(path);
  StFile f;
  f.metadata = m.metadata();
  for (const auto& [name, t] : m.tensors()) f.tensors.emplace(name, StTensor{t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.bytes)});
  return f;
}

}  // namespace ms
