// rank_sum: sums of per-rank doubles over a group, added in rank order, so every rank gets the
// same bits (the values travel bit-exactly through an all-gather, two floats per double). Used for
// the decisions every rank must take identically: the loss, the gradient norm, LAMB's norms.
#pragma once
#include <cstddef>

#include "base/aligned.h"       // AlignedBuffer
#include "comm/communicator.h"  // Communicator

namespace ms {

class RankOrderSum {
 public:
  // max_values: the most values one call sums (the buffer is allocated once, here).
  RankOrderSum(Communicator& comm, size_t max_values);
  // total[i] = sum over ranks r = 0..size-1 of rank r's mine[i], i < n. Blocking; returns the
  // seconds spent waiting on the group.
  double sum(const double* mine, double* total, size_t n);
  double sum(double v) {
    double t;
    sum(&v, &t, 1);
    return t;
  }

 private:
  Communicator& comm_;
  size_t max_;
  AlignedBuffer<float> buf_;
};

}  // namespace ms
