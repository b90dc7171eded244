// comm_cost.cpp: see comm_cost.h.
#include "plan/comm_cost.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ms::plan {

namespace {
void check(double bytes, int n, const Link& link) {
  MS_CHECK(bytes >= 0 && n >= 1, "plan: collective of {} bytes over {} ranks", bytes, n);
  MS_CHECK(
      link.bandwidth_Bps > 0 && link.latency_s >= 0 && link.eta_inf > 0 && link.eta_inf <= 1 && link.half_bytes >= 0,
      "plan: link bandwidth {} B/s, latency {} s, eta_inf {}, half {} B out of range", link.bandwidth_Bps,
      link.latency_s, link.eta_inf, link.half_bytes);
}
}  // namespace

double Link::effective_Bps(double bytes) const {
  const double sat = half_bytes > 0 ? bytes / (bytes + half_bytes) : 1.0;
  return bandwidth_Bps * eta_inf * std::max(sat, 1e-12);
}

double ring_all_gather_seconds(double bytes, int n, const Link& link) {
  check(bytes, n, link);
  if (n == 1) return 0;
  const double steps = n - 1;
  return steps * link.latency_s + steps / n * bytes / link.effective_Bps(bytes / n);
}

double ring_reduce_scatter_seconds(double bytes, int n, const Link& link) {
  return ring_all_gather_seconds(bytes, n, link);
}

double ring_all_reduce_seconds(double bytes, int n, const Link& link) {
  check(bytes, n, link);
  if (n == 1) return 0;
  const double steps = n - 1;
  return 2.0 * steps * link.latency_s + 2.0 * steps / n * bytes / link.effective_Bps(bytes / n);
}

double tree_all_reduce_seconds(double bytes, int n, const Link& link) {
  check(bytes, n, link);
  if (n == 1) return 0;
  return 2.0 * std::ceil(std::log2(static_cast<double>(n))) * link.latency_s + 2.0 * bytes / link.effective_Bps(bytes);
}

double all_reduce_seconds(double bytes, int n, const Link& link) {
  return std::min(ring_all_reduce_seconds(bytes, n, link), tree_all_reduce_seconds(bytes, n, link));
}

double p2p_seconds(double bytes, const Link& link) {
  check(bytes, 2, link);
  return link.latency_s + bytes / link.effective_Bps(bytes);
}

double all_reduce_bus_Bps(double bytes, double seconds, int n) {
  MS_CHECK(seconds > 0 && n >= 1, "plan: bus bandwidth of {} s over {} ranks", seconds, n);
  return bytes / seconds * 2.0 * (n - 1) / n;
}

double all_gather_bus_Bps(double bytes, double seconds, int n) {
  MS_CHECK(seconds > 0 && n >= 1, "plan: bus bandwidth of {} s over {} ranks", seconds, n);
  return bytes / seconds * (n - 1) / n;
}

}  // namespace ms::plan
