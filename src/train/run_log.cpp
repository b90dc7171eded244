// run_log.cpp: see run_log.h.
#include "train/run_log.h"

#include <unistd.h>  // isatty

#include <cmath>  // std::isfinite
#include <filesystem>

#include <fmt/format.h>       // fmt::print
#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"  // MS_SYSCHECK

namespace ms {

RunLog::RunLog(const std::string& out_dir, ProgressMode mode, bool silent) {
  silent_ = silent;
  if (silent_) return;
  std::filesystem::create_directories(out_dir);
  std::string path = out_dir + "/log.jsonl";
  jsonl_.open(path, std::ios::app);
  MS_SYSCHECK(jsonl_.good(), "{}: cannot open run log", path);
  bar_ = mode == ProgressMode::kBar || (mode == ProgressMode::kAuto && isatty(STDOUT_FILENO));
}

RunLog::~RunLog() {
  if (bar_shown_) std::fputc('\n', stdout);
}

static std::string hms(double s) {
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  return fmt::format("{}m{:02}s", t / 60, t % 60);
}

void RunLog::write_line(const nlohmann::json& j) {
  if (silent_) return;
  jsonl_ << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
}

void RunLog::clear_bar() {
  if (bar_shown_) { std::fputs("\r\033[2K", stdout); bar_shown_ = false; }
}

void RunLog::step(const StepRecord& r) {
  if (silent_) return;
  nlohmann::json j = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                      {"tokens_per_s", r.tokens_per_s}, {"step_ms", r.step_seconds * 1e3}, {"mfu", r.mfu},
                      {"mfu_gemm", r.mfu_gemm}};  // NaN: null
  if (r.comm_exposed_ms >= 0) j["comm_exposed_ms"] = r.comm_exposed_ms;
  if (r.tp_exposed_ms >= 0) j["tp_exposed_ms"] = r.tp_exposed_ms;
  if (r.pp_wait_ms >= 0) j["pp_wait_ms"] = r.pp_wait_ms, j["pp_idle"] = r.pp_idle;
  write_line(j);
  std::string stats = fmt::format("loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | {:.0f} ms | MFU {}", r.loss,
                                  r.lr, r.grad_norm, r.tokens_per_s, r.step_seconds * 1e3,
                                  std::isfinite(r.mfu) ? fmt::format("{:.1f}%", r.mfu * 100) : std::string("n/a"));
  if (std::isfinite(r.mfu_gemm))
    stats += fmt::format(" ({:.1f}% of measured {} GEMM)", r.mfu_gemm * 100, dtype_name(r.precision));
  if (r.comm_exposed_ms >= 0) stats += fmt::format(" | comm {:.0f} ms exposed", r.comm_exposed_ms);
  if (r.tp_exposed_ms >= 0) stats += fmt::format(" | tp {:.0f} ms exposed", r.tp_exposed_ms);
  if (r.pp_wait_ms >= 0) stats += fmt::format(" | pp {:.0f} ms waited, {:.0f}% idle", r.pp_wait_ms, r.pp_idle * 100);
  if (bar_) {
    double elapsed = since_start_.seconds();
    double eta = r.step > 0 ? elapsed / r.step * (r.total_steps - r.step) : 0;
    const int width = 24;
    int filled = r.total_steps ? width * r.step / r.total_steps : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    fmt::print("\r\033[2K[{}] {}/{} {} | ETA {}", bar, r.step, r.total_steps, stats, hms(eta));
    std::fflush(stdout);
    bar_shown_ = true;
  } else {
    fmt::print("step {:5d}/{} | {}\n", r.step, r.total_steps, stats);
    std::fflush(stdout);
  }
}

void RunLog::eval(int step, float val_loss) {
  if (silent_) return;
  write_line({{"step", step}, {"val_loss", val_loss}});
  clear_bar();
  fmt::print("step {:5d} | val loss {:.4f}\n", step, val_loss);
  std::fflush(stdout);
}

void RunLog::message(const std::string& event, const std::string& text) {
  if (silent_) return;
  write_line({{"event", event}, {"message", text}});
  clear_bar();
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

}  // namespace ms
