// safetensors.cpp: see safetensors.h.
#include "base/safetensors.h"

#include <optional>

#include <cstring>  // std::memcpy
#include <fstream>  // std::ifstream, std::ofstream
#include <filesystem>

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/atomic_file.h"  // write_file_atomic
#include "base/check.h"        // MS_CHECK

namespace ms {

namespace {
bool supported(DType t) { return t == DType::kF32 || t == DType::kI32 || t == DType::kF64; }
}  // namespace

size_t StTensor::numel() const {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<double> StTensor::to_f64() const {
  std::vector<double> out(numel());
  for (size_t i = 0; i < out.size(); i++) {
    if (dtype == DType::kF32) out[i] = f32()[i];
    else if (dtype == DType::kI32) out[i] = i32()[i];
    else out[i] = reinterpret_cast<const double*>(bytes.data())[i];
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

void save_safetensors(const std::string& path, const StFile& file) {
  nlohmann::json header = nlohmann::json::object();
  size_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    MS_CHECK(supported(t.dtype), "{}: tensor '{}': unsupported dtype {}", path, name, safetensors_dtype(t.dtype));
    MS_CHECK(t.bytes.size() == t.numel() * t.elem_size(), "{}: tensor '{}': {} bytes for shape of {} elements", path, name, t.bytes.size(), t.numel());
    header[name] = {{"dtype", safetensors_dtype(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  const uint64_t n = h.size();
  std::vector<ByteRange> parts = {{&n, 8}, {h.data(), h.size()}};
  for (const auto& [name, t] : file.tensors) parts.push_back({t.bytes.data(), t.bytes.size()});
  write_file_atomic(path, parts);
}

StFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MS_SYSCHECK(in.good(), "{}: cannot open", path);
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  MS_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes)", path, size);
  uint64_t hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  MS_CHECK(hlen <= size - 8, "{}: header length {} exceeds the file size {}", path, hlen, size);
  std::string h(hlen, '\0');
  in.read(h.data(), static_cast<std::streamsize>(hlen));
  nlohmann::json header;
  try { header = nlohmann::json::parse(h); } catch (const std::exception& e) {
    MS_FAIL("{}: bad safetensors JSON header: {}", path, e.what());
  }
  const uint64_t data_size = size - 8 - hlen;
  StFile f;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, mv] : v.items()) f.metadata[k] = mv.get<std::string>();
      continue;
    }
    StTensor t;
    const std::string dt = v.at("dtype").get<std::string>();
    const std::optional<DType> d = dtype_from_safetensors(dt);
    MS_CHECK(d && supported(*d), "{}: tensor '{}': unsupported dtype {} (F32, I32 or F64)", path, name, dt);
    t.dtype = *d;
    t.shape = v.at("shape").get<std::vector<int64_t>>();
    auto offs = v.at("data_offsets").get<std::vector<uint64_t>>();
    MS_CHECK(offs.size() == 2 && offs[0] <= offs[1] && offs[1] <= data_size,
             "{}: tensor '{}': data offsets outside the file", path, name);
    MS_CHECK(offs[1] - offs[0] == t.numel() * t.elem_size(), "{}: tensor '{}': {} bytes for shape of {} elements",
             path, name, offs[1] - offs[0], t.numel());
    t.bytes.resize(offs[1] - offs[0]);
    in.seekg(static_cast<std::streamoff>(8 + hlen + offs[0]));
    in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    MS_CHECK(in.good(), "{}: tensor '{}': read failed", path, name);
    f.tensors.emplace(name, std::move(t));
  }
  return f;
}

}  // namespace ms
