// rank_sum.cpp: see rank_sum.h.
#include "parallel/rank_sum.h"

#include <algorithm>  // std::max
#include <cstring>    // std::memcpy

#include "base/check.h"      // MS_CHECK
#include "parallel/timed_wait.h"  // wait_timed

namespace ms {

RankOrderSum::RankOrderSum(Communicator& comm, size_t max_values) : comm_(comm), max_(max_values) {
  buf_.resize(static_cast<size_t>(comm.size()) * 2 * std::max<size_t>(max_values, 1));
}

double RankOrderSum::sum(const double* mine, double* total, size_t n) {
  MS_CHECK(n <= max_, "rank sum on group '{}': {} values, room for {}", comm_.name(), n, max_);
  const size_t words = 2 * n;
  float* slot = buf_.data() + static_cast<size_t>(comm_.rank()) * words;
  std::memcpy(slot, mine, n * sizeof(double));
  CommWork w = comm_.start_all_gather(slot, buf_.data(), words, DType::kF32);
  const double waited = wait_timed(w, "wait exchange");
  for (size_t i = 0; i < n; i++) total[i] = 0;
  for (int r = 0; r < comm_.size(); r++) {
    const float* s = buf_.data() + static_cast<size_t>(r) * words;
    for (size_t i = 0; i < n; i++) {
      double v;
      std::memcpy(&v, s + 2 * i, sizeof(double));
      total[i] += v;
    }
  }
  return waited;
}

}  // namespace ms
