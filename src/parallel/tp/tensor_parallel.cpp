// tensor_parallel.cpp: see tensor_parallel.h.
#include "parallel/tp/tensor_parallel.h"

#include <cstring>  // std::memcpy

#include "base/check.h"          // MS_CHECK
#include "model/param_layout.h"  // build_param_layout, place_param
#include "kernels/backend.h"      // KernelBackend::copy
#include "parallel/timed_wait.h" // wait_timed, stream_order_of

namespace ms {

TensorParallel::TensorParallel(GPT& model, Communicator& tp, const ParallelConfig& parallel, size_t max_rows)
    : model_(model), comm_(tp), model_cfg_(model.config()), sums_(tp, 2 * model.param_specs().size()) {
  const ModelShard& s = model.shard();
  MS_CHECK(s.parts == tp.size() && s.index == tp.rank(),
           "tensor parallel: the model is part {} of {}, the group '{}' has this rank as {} of {}", s.index, s.parts,
           tp.name(), tp.rank(), tp.size());
  MS_CHECK(s.seq_sharded == parallel.sequence_parallel, "tensor parallel: the model's sequence sharding differs "
           "from parallel.sequence_parallel");
  regions_ = std::make_unique<TpRegions>(tp, parallel.tp_chunks, parallel.sequence_parallel, max_rows,
                                         model_cfg_.n_embd, model.kernels(), stream_order_of(model));
  size_t packed = 0;
  for (const ParamSpec& p : model.param_specs()) {
    counted_.push_back(p.sharded() || tp.rank() == 0);
    partial_.push_back(p.grad_partial);
    if (p.grad_partial) packed += p.numel();
  }
  pack_.resize(std::max<size_t>(packed, 1), model.device());
  norms_in_.resize(2 * counted_.size());
  norms_out_.resize(2 * counted_.size());
  model_.set_tensor_regions(regions_.get());
}

TensorParallel::~TensorParallel() { model_.set_tensor_regions(nullptr); }

void TensorParallel::all_reduce_partial_grads(float* grads, const std::vector<ParamTensor>& views) {
  size_t n = 0;
  for (const ParamTensor& v : views) n += v.numel;
  if (n == 0) return;
  MS_CHECK(n <= pack_.size(), "tensor parallel: {} partial-gradient elements, room for {}", n, pack_.size());
  KernelBackend& k = model_.kernels();
  const StreamOrder on = stream_order_of(model_);
  float* p = pack_.data();
  for (const ParamTensor& v : views) { k.copy(p, grads + v.offset, v.numel); p += v.numel; }
  CommWork w = comm_.start_all_reduce(pack_.data(), n, DType::kF32, ReduceOp::kSum, on);
  exposed_s_ += wait_timed(w, "wait tp all_reduce grads", on);
  p = pack_.data();
  for (const ParamTensor& v : views) { k.copy(grads + v.offset, p, v.numel); p += v.numel; }
}

double TensorParallel::sum_across_ranks(double v) {
  double t = 0;
  exposed_s_ += sums_.sum(&v, &t, 1);
  return t;
}

void TensorParallel::reduce_tensor_norms(double* w_sq, double* r_sq) {
  const size_t nt = counted_.size();
  std::memcpy(norms_in_.data(), w_sq, nt * sizeof(double));
  std::memcpy(norms_in_.data() + nt, r_sq, nt * sizeof(double));
  exposed_s_ += sums_.sum(norms_in_.data(), norms_out_.data(), 2 * nt);
  const auto& specs = model_.param_specs();
  for (size_t i = 0; i < nt; i++)
    if (specs[i].sharded()) {
      w_sq[i] = norms_out_[i];
      r_sq[i] = norms_out_[nt + i];
    }
}

std::vector<float> TensorParallel::gather_full_params() {
  const int P = comm_.size();
  const size_t local = model_.num_params();
  std::vector<float> all(local * P);
  // Host memory on every device (checkpoints and export read it): this rank's part copied first.
  model_.copy_params_to_host(all.data() + static_cast<size_t>(comm_.rank()) * local);
  comm_.all_gather(all.data() + static_cast<size_t>(comm_.rank()) * local, all.data(), local, DType::kF32);
  const ModelShard& sh = model_.shard();
  ModelShard chunk;  // the same layers, not split over tensor-parallel ranks
  chunk.layer_begin = sh.layer_begin, chunk.layer_end = sh.layer_end;
  const ParamLayout full = build_param_layout(model_cfg_, chunk);
  std::vector<float> out(full.total);
  const auto& specs = model_.param_specs();
  MS_CHECK(specs.size() == full.specs.size(), "tensor parallel: {} local tensors, {} in the whole chunk", specs.size(),
           full.specs.size());
  for (size_t i = 0; i < specs.size(); i++)
    for (int r = 0; r < P; r++) {
      if (!specs[i].sharded() && r > 0) continue;  // replicated: identical on every rank
      place_param(specs[i], P, r, all.data() + r * local + specs[i].offset, out.data() + full.specs[i].offset);
    }
  return out;
}

}  // namespace ms
