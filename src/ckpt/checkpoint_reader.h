// checkpoint_reader: whole tensors out of a checkpoint folder, whatever layout saved it. Each file
// is mapped on first use and checked before any of its bytes is used: its size and XXH64 against
// the manifest, then its safetensors structure, then every entry's dtype and length. A tensor is
// assembled from its entries (ZeRO pieces of TP parts) and its TP parts (placed as the model's
// layout cuts them, model/param_layout.h), so the caller can cut it again for its own layout.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/safetensors.h"    // StMapped
#include "ckpt/manifest.h"       // Manifest, StateKind
#include "ckpt/storage.h"        // CheckpointStorage
#include "config/model_config.h" // ModelConfig
#include "model/param_layout.h"   // ParamLayout

namespace ms {

class CheckpointReader {
 public:
  // dir: the step folder, relative to storage's root. model: the checkpoint's model (== the run's).
  CheckpointReader(const CheckpointStorage& storage, std::string dir, Manifest manifest, const ModelConfig& model);
  ~CheckpointReader();

  const Manifest& manifest() const { return manifest_; }
  // The whole tensor (its whole shape, row-major) of `kind`, from every file that holds a piece.
  std::vector<float> whole(const std::string& tensor, StateKind kind);
  // How many TP parts the saving run cut it into, and part p of that cut alone (reads only the
  // files holding that part: a run restoring under the saving TP degree reads its own part).
  int saved_parts(const std::string& tensor, StateKind kind) const;
  std::vector<float> part(const std::string& tensor, StateKind kind, int p);
  // Reads and checks one file of the manifest (ckpt inspect); throws naming it.
  void verify(const std::string& file_name) { file(file_name); }
  // The files holding part `p` of `tensor` (`kind`), or every part's with p = -1.
  std::vector<std::string> files_of(const std::string& tensor, StateKind kind, int p) const;
  // Reads and checks these files (those not read yet) on up to `threads` threads at once: the
  // restore's read and XXH64 pass spread over the reader's cores. Throws as file() would, naming
  // the first failing file in the given order, after every thread ended (keeping none of this pass).
  void verify_files(const std::vector<std::string>& names, int threads);

  int files_read() const { return static_cast<int>(files_.size()); }
  uint64_t bytes_read() const { return bytes_read_; }
  std::vector<std::string> file_names() const;

 private:
  struct Piece {
    const ManifestFile* file;
    const ManifestEntry* entry;
  };
  const StMapped& file(const std::string& name);
  std::unique_ptr<StMapped> load(const std::string& name) const;  // map + checks (thread-safe)
  const std::vector<Piece>& pieces(const std::string& tensor, StateKind kind) const;
  const CheckpointStorage& storage_;
  std::string dir_;
  Manifest manifest_;
  ModelConfig model_;
  std::map<std::string, const ManifestFile*> by_name_;
  std::map<std::pair<std::string, StateKind>, std::vector<Piece>> pieces_;  // every entry, by tensor and kind
  std::map<int, ParamLayout> layouts_;  // the model cut into N TP parts, by N
  std::map<std::string, std::unique_ptr<StMapped>> files_;
  uint64_t bytes_read_ = 0;
};

}  // namespace ms
