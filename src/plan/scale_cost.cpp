// scale_cost.cpp: see scale_cost.h.
#include "plan/scale_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "base/check.h"

namespace ms::plan {

namespace {

// E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, Simpson's rule on [-10, 10] (the integrand is
// below 1e-20 outside it for every n up to 1e9).
double integrate_expected_max(int n) {
  constexpr double lo = -10.0, hi = 10.0;
  constexpr int steps = 8000;  // even
  const double h = (hi - lo) / steps, inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
  auto f = [&](double x) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    if (cdf <= 0) return 0.0;
    return x * n * inv_sqrt_2pi * std::exp(-0.5 * x * x + (n - 1) * std::log(cdf));
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; i++) sum += (i % 2 ? 4.0 : 2.0) * f(lo + i * h);
  return sum * h / 3.0;
}

}  // namespace

double expected_max_std_normal(int n) {
  MS_CHECK(n >= 1, "expected_max_std_normal: n = {} must be >= 1", n);
  if (n == 1) return 0.0;
  static std::mutex mu;
  static std::map<int, double> cache;  // the search asks for the same few n many times
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(n);
  if (it != cache.end()) return it->second;
  return cache[n] = integrate_expected_max(n);
}

double straggler_seconds(double compute_s, double cv, int n) {
  return cv > 0 ? compute_s * cv * expected_max_std_normal(n) : 0.0;
}

int dp_group_hosts(int tp, int dp, int devices_per_node) {
  const int hosts = (dp * tp + devices_per_node - 1) / devices_per_node;
  return std::clamp(hosts, 1, std::max(dp, 1));
}

Link dp_ring_link(const Link& nic, int hosts, int hosts_per_switch, double spine_eta, double oversubscription) {
  if (hosts <= hosts_per_switch) return nic;
  Link l = nic;
  l.bandwidth_Bps = nic.bandwidth_Bps * spine_eta / std::max(1.0, oversubscription);
  return l;
}

}  // namespace ms::plan
