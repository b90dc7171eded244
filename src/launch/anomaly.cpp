// anomaly: see anomaly.h.
#include "launch/anomaly.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"

namespace ms::launch {

LossSpikeAction parse_loss_spike_action(const std::string& text) {
  if (text == "warn") return LossSpikeAction::kWarn;
  if (text == "restart") return LossSpikeAction::kRestart;
  MS_FAIL("--loss-spike-action must be warn or restart, got '{}'", text);
}

namespace {
double seconds(DriverClock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

DriverClock::time_point LoopClock::tick(DriverClock::time_point real) {
  if (last_real_ != DriverClock::time_point{} && real - last_real_ > max_gap_) skipped_ += real - last_real_ - max_gap_;
  last_real_ = real;
  now_ = std::max(now_, real - skipped_);
  return now_;
}

void ProgressWatch::start(DriverClock::time_point now) {
  last_ = now;
  steps_this_attempt_ = 0;
}

void ProgressWatch::progress(DriverClock::time_point now, double step_ms) {
  last_ = now;
  steps_this_attempt_++;
  if (std::isfinite(step_ms) && step_ms > 0) {
    step_ms_.push_back(step_ms);
    if (step_ms_.size() > 50) step_ms_.pop_front();
  }
}

double ProgressWatch::median_step_ms() const {
  if (step_ms_.empty()) return NAN;
  std::vector<double> v(step_ms_.begin(), step_ms_.end());
  std::nth_element(v.begin(), v.begin() + (long)(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double ProgressWatch::limit_s() const {
  if (steps_this_attempt_ == 0) return opt_.startup_s;
  const double med = median_step_ms();
  return std::max(opt_.min_s, std::isfinite(med) ? opt_.factor * med / 1000.0 : 0.0);
}

std::optional<std::string> ProgressWatch::check(DriverClock::time_point now) const {
  const double idle = seconds(now - last_), limit = limit_s();
  if (idle <= limit) return std::nullopt;
  if (steps_this_attempt_ == 0)
    return fmt::format("no step completed {:.1f} s after the start (limit {:.1f} s)", idle, limit);
  return fmt::format("no step completed for {:.1f} s (limit {:.1f} s: max({:.1f} s, {:g} x the median step time {:.2f} s))",
                     idle, limit, opt_.min_s, opt_.factor, median_step_ms() / 1000.0);
}

void TrafficWatch::start(DriverClock::time_point now) {
  judged_ = false;
  last_traffic_ = now;
}

void TrafficWatch::add(DriverClock::time_point now, int64_t bytes, bool judged) {
  if (judged && !judged_) {
    judged_ = true;
    last_traffic_ = now;
  }
  if (bytes > 0) last_traffic_ = now;
}

std::optional<std::string> TrafficWatch::check(DriverClock::time_point now) const {
  if (!judged_ || timeout_s_ <= 0) return std::nullopt;
  const double idle = seconds(now - last_traffic_);
  if (idle <= timeout_s_) return std::nullopt;
  return fmt::format("no collective or p2p traffic for {:.1f} s (limit {:.1f} s)", idle, timeout_s_);
}

std::optional<std::string> LossWatch::add(int step, double loss, bool finite) {
  if (!finite || !std::isfinite(loss)) return fmt::format("non-finite loss at step {}", step);
  std::optional<std::string> spike;
  if (z_limit_ > 0 && (int)losses_.size() >= window_) {
    double mean = 0;
    for (double x : losses_) mean += x;
    mean /= (double)losses_.size();
    double var = 0;
    for (double x : losses_) var += (x - mean) * (x - mean);
    const double sd = std::max(std::sqrt(var / (double)losses_.size()), 1e-3 * std::abs(mean));
    const double z = (loss - mean) / sd;
    if (z > z_limit_)
      spike = fmt::format("loss spike at step {}: {:.4f} is {:.1f} standard deviations above the mean {:.4f} of the "
                          "last {} steps (limit {:g})", step, loss, z, mean, losses_.size(), z_limit_);
  }
  losses_.push_back(loss);
  if ((int)losses_.size() > window_) losses_.pop_front();
  return spike;
}

}  // namespace ms::launch
