// run_folder: see run_folder.h.
#include "launch/run_folder.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"  // write_text_atomic

namespace ms::launch {

namespace fs = std::filesystem;
using nlohmann::json;

void archive_hang_dumps(const std::string& out_dir, int attempt) {
  if (out_dir.empty()) return;
  const fs::path hang = fs::path(out_dir) / "hang";
  std::error_code ec;
  if (!fs::is_directory(hang, ec)) return;
  const fs::path to = fs::path(out_dir) / "attempts" / std::to_string(attempt) / "hang";
  fs::create_directories(to, ec);
  for (const auto& e : fs::directory_iterator(hang, ec)) fs::rename(e.path(), to / e.path().filename(), ec);
}

std::string dump_segment(const std::string& out_dir, int rank) {
  if (out_dir.empty()) return "";
  std::ifstream f(fs::path(out_dir) / "hang" / fmt::format("rank-{:05d}.json", rank));
  const json j = f ? json::parse(f, nullptr, false) : json();
  if (!j.is_object() || !j.contains("segment") || !j["segment"].is_object()) return "";
  const json& name = j["segment"]["name"];
  return name.is_string() ? name.get<std::string>() : "";
}

std::string write_run_json(const std::string& launch_dir, const std::string& out_dir, int world) {
  const json j = {{"out_dir", out_dir}, {"records_dir", (fs::path(out_dir) / "records").string()}, {"world", world}};
  try {
    write_text_atomic((fs::path(launch_dir) / "run.json").string(), j.dump(2) + "\n");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace ms::launch
