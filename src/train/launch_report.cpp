// launch_report.cpp: see launch_report.h.
#include "train/launch_report.h"

#include <cstdlib>  // std::getenv
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"  // write_text_atomic

namespace ms {

void write_launch_report(const Config& cfg, int rank, int world) {
  const char* dir = std::getenv("MEGASCALE_LAUNCH_DIR");
  const char* local = std::getenv("LOCAL_RANK");
  const bool first_on_host = rank == 0 || (local != nullptr && std::string(local) == "0");
  if (!first_on_host || dir == nullptr || *dir == '\0') return;
  namespace fs = std::filesystem;
  const fs::path out_dir = fs::absolute(cfg.train.out_dir).lexically_normal();
  const nlohmann::json j = {{"out_dir", out_dir.string()},
                            {"records_dir", (out_dir / "records").string()},
                            {"world", world},
                            {"config", to_toml(cfg)}};
  write_text_atomic((fs::path(dir) / "run.json").string(), j.dump(2) + "\n");
}

}  // namespace ms
