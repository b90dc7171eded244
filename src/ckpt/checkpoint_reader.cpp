// checkpoint_reader.cpp: see checkpoint_reader.h.
#include "ckpt/checkpoint_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>  // std::memcpy
#include <exception>
#include <set>
#include <thread>

#include "base/check.h"          // MS_CHECK
#include "model/param_layout.h"  // build_param_layout, place_param (also in the header)

namespace ms {

CheckpointReader::CheckpointReader(const CheckpointStorage& storage, std::string dir, Manifest manifest,
                                   const ModelConfig& model)
    : storage_(storage), dir_(std::move(dir)), manifest_(std::move(manifest)), model_(model) {
  for (const ManifestFile& f : manifest_.files) {
    by_name_[f.name] = &f;
    for (const ManifestEntry& e : f.entries) pieces_[{e.tensor, e.kind}].push_back({&f, &e});
  }
}

CheckpointReader::~CheckpointReader() = default;

std::vector<std::string> CheckpointReader::file_names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : files_) out.push_back(name);
  return out;
}

std::unique_ptr<StMapped> CheckpointReader::load(const std::string& name) const {
  const ManifestFile& rec = *by_name_.at(name);
  const std::string rel = dir_ + "/" + name, where = storage_.describe() + "/" + rel;
  MappedFile mapped = storage_.open(rel);
  MS_CHECK(mapped.size() == rec.bytes, "{}: {} bytes, the manifest says {} (truncated or replaced)", where,
           mapped.size(), rec.bytes);
  const std::string h = xxh64_hex(xxh64_of(mapped.data(), mapped.size()));
  MS_CHECK(h == rec.xxh64, "{}: checksum xxh64 {} does not match the manifest's {} (the file is corrupt)", where, h,
           rec.xxh64);
  auto st = std::make_unique<StMapped>(std::move(mapped));
  for (const ManifestEntry& e : rec.entries) {
    const StMappedTensor& t = st->at(e.key);
    MS_CHECK(t.dtype == DType::kF32 && t.bytes == (e.hi - e.lo) * sizeof(float),
             "{}: tensor '{}' holds {} bytes of {}, the manifest says {} fp32 elements", where, e.key, t.bytes,
             dtype_name(t.dtype), e.hi - e.lo);
  }
  return st;
}

const StMapped& CheckpointReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return *it->second;
  std::unique_ptr<StMapped> st = load(name);
  bytes_read_ += st->file().size();
  return *files_.emplace(name, std::move(st)).first->second;
}

std::vector<std::string> CheckpointReader::files_of(const std::string& tensor, StateKind kind, int p) const {
  std::vector<std::string> out;
  for (const Piece& x : pieces(tensor, kind))
    if ((p < 0 || x.entry->part == p) && std::find(out.begin(), out.end(), x.file->name) == out.end())
      out.push_back(x.file->name);
  return out;
}

void CheckpointReader::verify_files(const std::vector<std::string>& names, int threads) {
  std::vector<std::string> todo;
  std::set<std::string> seen;
  for (const std::string& n : names)
    if (!files_.count(n) && seen.insert(n).second) todo.push_back(n);
  std::vector<std::unique_ptr<StMapped>> loaded(todo.size());
  std::vector<std::exception_ptr> errors(todo.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        loaded[i] = load(todo[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, std::max<size_t>(todo.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; t++) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);  // nothing of a failed pass is kept
  for (size_t i = 0; i < todo.size(); i++) {
    bytes_read_ += loaded[i]->file().size();
    files_.emplace(todo[i], std::move(loaded[i]));
  }
}

namespace {
uint64_t numel_of(const ManifestTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}
}  // namespace

const std::vector<CheckpointReader::Piece>& CheckpointReader::pieces(const std::string& tensor, StateKind kind) const {
  auto it = pieces_.find({tensor, kind});
  MS_CHECK(it != pieces_.end(), "{}/{}: no {} entries for tensor '{}'", storage_.describe(), dir_,
           state_kind_name(kind), tensor);
  return it->second;
}

int CheckpointReader::saved_parts(const std::string& tensor, StateKind kind) const {
  return pieces(tensor, kind).front().entry->parts;  // the manifest was checked: one cut per tensor
}

std::vector<float> CheckpointReader::part(const std::string& tensor, StateKind kind, int p) {
  auto tit = manifest_.tensors.find(tensor);
  MS_CHECK(tit != manifest_.tensors.end(), "{}/{}: no tensor '{}' in the manifest", storage_.describe(), dir_, tensor);
  const int parts = saved_parts(tensor, kind);
  std::vector<float> out(numel_of(tit->second) / static_cast<uint64_t>(parts));
  // The manifest was checked to cover each part exactly once.
  for (const Piece& x : pieces(tensor, kind))
    if (x.entry->part == p)
      std::memcpy(out.data() + x.entry->lo, file(x.file->name).at(x.entry->key).data,
                  (x.entry->hi - x.entry->lo) * sizeof(float));
  return out;
}

std::vector<float> CheckpointReader::whole(const std::string& tensor, StateKind kind) {
  const int parts = saved_parts(tensor, kind);
  if (parts == 1) return part(tensor, kind, 0);
  std::vector<float> full(numel_of(manifest_.tensors.at(tensor)));
  // The part's spec under the saving layout: the same model cut into `parts` (the head copy is cut
  // as the token embedding it copies).
  const bool head_copy = tensor == kHeadCopyName && model_.tie_embeddings;
  const std::string spec_name = head_copy ? std::string(token_embedding_name(model_)) : tensor;
  auto lit = layouts_.find(parts);
  if (lit == layouts_.end()) lit = layouts_.emplace(parts, build_param_layout(model_, ModelShard{parts, 0})).first;
  const ParamSpec* spec = nullptr;
  for (const ParamSpec& s : lit->second.specs)
    if (s.name == spec_name) spec = &s;
  MS_CHECK(spec, "{}/{}: tensor '{}' is not part of the model", storage_.describe(), dir_, tensor);
  for (int p = 0; p < parts; p++) place_param(*spec, parts, p, part(tensor, kind, p).data(), full.data());
  return full;
}

}  // namespace ms
