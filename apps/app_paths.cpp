// app_paths.cpp: see app_paths.h.
#include "app_paths.h"

#include <cstdlib>  // std::getenv
#include <filesystem>

#include "base/check.h"  // MS_CHECK, MS_FAIL

namespace ms {

namespace fs = std::filesystem;

std::vector<std::string> janitor_command() { return {"/proc/self/exe", kJanitorCommand}; }

std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  MS_CHECK(!ec, "cannot resolve /proc/self/exe: {}", ec.message());
  return self.string();
}

std::string default_tokenizer_dir() {
  if (const char* env = std::getenv("MEGASCALE_TOKENIZER_DIR"); env && *env) return env;
  const fs::path exe_dir = fs::path(self_executable()).parent_path();
  for (const fs::path& d : {exe_dir / "share/megascale/gpt2", exe_dir / "../share/megascale/gpt2"})
    if (fs::exists(d / "encoder.json")) return fs::weakly_canonical(d).string();
  MS_FAIL("GPT-2's BPE tables (encoder.json, vocab.bpe) are not beside {}: run scripts/setup.sh, set "
          "data.tokenizer_dir, or set MEGASCALE_TOKENIZER_DIR", exe_dir.string());
}

std::string tokenizer_dir_or_default(const std::string& dir) { return dir.empty() ? default_tokenizer_dir() : dir; }

std::string default_dashboard_dir() {
  const fs::path exe_dir = fs::path(self_executable()).parent_path();
  for (const fs::path& d : {exe_dir / "share/megascale/dashboard", exe_dir / "../share/megascale/dashboard"})
    if (fs::exists(d / "index.html")) return fs::weakly_canonical(d).string();
  return "";
}

std::vector<std::string> resolve_launch_command(const std::vector<std::string>& cmd) {
  MS_CHECK(!cmd.empty(), "no command to launch: give one after --");
  // A path ("/bin/sh", "./a.out", "build/x") runs as given; a bare word is a megascale subcommand.
  if (cmd[0].find('/') != std::string::npos) return cmd;
  std::vector<std::string> out = {self_executable()};
  out.insert(out.end(), cmd.begin(), cmd.end());
  return out;
}

}  // namespace ms
