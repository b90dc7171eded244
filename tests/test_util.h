// test_util: small helpers shared by the tests: a fresh temporary folder, running a command and
// capturing its output and exit code, and relative-error comparisons that print the worst entries.
#pragma once
#include <sys/wait.h>  // WEXITSTATUS

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace ms::testing {

inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("megascale_" + tag + "_XXXXXX")).string();
  char* p = mkdtemp(tmpl.data());
  return p ? std::string(p) : std::string();
}

struct CmdResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  int st = pclose(f);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The Python that owns Debian's python3-torch.
inline const char* torch_python() { return "/usr/bin/python3"; }

// ||a - b||_2 / max(||b||_2, floor)
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-12) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) { num += (a[i] - b[i]) * (a[i] - b[i]); den += b[i] * b[i]; }
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace ms::testing
