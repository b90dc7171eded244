// tp_regions.cpp: see tp_regions.h.
#include "parallel/tp/tp_regions.h"

#include <algorithm>  // std::min

#include "base/check.h"            // MS_CHECK
#include "parallel/timed_wait.h"   // wait_timed

namespace ms {

TpRegions::TpRegions(Communicator& tp, int chunks, bool sequence_parallel, size_t full_rows, int width,
                     KernelBackend& k, StreamOrder on)
    : comm_(tp), parts_(tp.size()), index_(tp.rank()), chunks_(chunks), sp_(sequence_parallel),
      full_rows_(full_rows), width_(width), k_(k), on_(on) {
  MS_CHECK(chunks >= 1, "tensor parallel: tp_chunks must be >= 1, got {}", chunks);
  MS_CHECK(!sp_ || full_rows % parts_ == 0, "tensor parallel: {} rows do not split over {} sequence-parallel ranks",
           full_rows, parts_);
  if (sp_ && chunks_ > 1) stage_.resize(full_rows * width, on.device);
  reduced_.resize((sp_ ? full_rows / parts_ : full_rows) * width, on.device);
  works_.resize(static_cast<size_t>(chunks_));
}

void TpRegions::wait(CommWork& w, const char* what) { exposed_s_ += wait_timed(w, what, on_); }

const float* TpRegions::gather_rows(const float* local, float* full, int n, int width, Rows ready) {
  if (!sp_) {
    ready(0, n);
    return local;
  }
  MS_CHECK(width == width_ && static_cast<size_t>(n) * parts_ <= full_rows_,
           "tensor parallel: gather of {}x{} rows exceeds the {}x{} the regions were built for", n * parts_, width,
           full_rows_, width_);
  const size_t w = static_cast<size_t>(width);
  const int K = std::min(chunks_, n);
  if (K == 1) {
    works_[0] = comm_.start_all_gather(local, full, n * w, DType::kF32, on_);
    wait(works_[0], "wait tp all_gather");
    ready(0, n * parts_);
    return full;
  }
  for (int k = 0; k < K; k++) {
    const int c0 = chunk_lo(k, K, n), rows = chunk_lo(k + 1, K, n) - c0;
    works_[k] = comm_.start_all_gather(local + c0 * w, stage_.data() + parts_ * c0 * w, rows * w, DType::kF32, on_);
  }
  for (int k = 0; k < K; k++) {
    const int c0 = chunk_lo(k, K, n), c1 = chunk_lo(k + 1, K, n), rows = c1 - c0;
    wait(works_[k], "wait tp all_gather");
    for (int r = 0; r < parts_; r++)
      k_.copy(full + (static_cast<size_t>(r) * n + c0) * w, stage_.data() + (parts_ * c0 + r * rows) * w, rows * w);
    for (int r = 0; r < parts_; r++) ready(r * n + c0, r * n + c1);
  }
  return full;
}

void TpRegions::reduce_rows(float* partial, float* out, int n, int width, bool accumulate, Rows produce, Tail tail) {
  const size_t w = static_cast<size_t>(width);
  MS_CHECK(width == width_ && static_cast<size_t>(n) * w <= reduced_.size(),
           "tensor parallel: reduce of {} rows x {} exceeds the regions' buffers", n, width);
  float* dst = accumulate ? reduced_.data() : out;
  if (!sp_) {
    produce(0, n);
    works_[0] = comm_.start_all_reduce(partial, n * w, DType::kF32, ReduceOp::kSum, on_);
    tail();
    wait(works_[0], "wait tp all_reduce");
    if (accumulate) k_.add(out, partial, n * w);
    else k_.copy(out, partial, n * w);
    return;
  }
  const int K = std::min(chunks_, n);
  if (K == 1) {
    produce(0, n * parts_);
    works_[0] = comm_.start_reduce_scatter(partial, dst, n * w, DType::kF32, ReduceOp::kSum, on_);
  } else {
    for (int k = 0; k < K; k++) {
      const int c0 = chunk_lo(k, K, n), c1 = chunk_lo(k + 1, K, n), rows = c1 - c0;
      float* stage = stage_.data() + parts_ * c0 * w;
      for (int r = 0; r < parts_; r++) {
        produce(r * n + c0, r * n + c1);
        k_.copy(stage + r * rows * w, partial + (static_cast<size_t>(r) * n + c0) * w, rows * w);
      }
      works_[k] = comm_.start_reduce_scatter(stage, dst + c0 * w, rows * w, DType::kF32, ReduceOp::kSum, on_);
    }
  }
  tail();
  for (int k = 0; k < K; k++) wait(works_[k], "wait tp reduce_scatter");
  if (accumulate) k_.add(out, reduced_.data(), n * w);
}

void TpRegions::all_reduce_max(float* v, size_t n) {
  works_[0] = comm_.start_all_reduce(v, n, DType::kF32, ReduceOp::kMax, on_);
  wait(works_[0], "wait tp all_reduce");
}

void TpRegions::all_reduce_sum(float* v, size_t n) {
  works_[0] = comm_.start_all_reduce(v, n, DType::kF32, ReduceOp::kSum, on_);
  wait(works_[0], "wait tp all_reduce");
}

}  // namespace ms
