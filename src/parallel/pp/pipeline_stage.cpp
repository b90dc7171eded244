// pipeline_stage.cpp: see pipeline_stage.h.
#include "parallel/pp/pipeline_stage.h"

#include <algorithm>  // std::max, std::copy
#include <string>

#include "base/check.h"            // MS_CHECK
#include "base/clock.h"            // Stopwatch
#include "model/gpt.h"             // GPT
#include "obs/trace_sink.h"        // TraceScope
#include "parallel/timed_wait.h"   // wait_timed

namespace ms {

namespace {
// Per local chunk of `stage`: the most micro-batches held at once, each from the first op for which
// opens(op) holds until that micro-batch's backward on the chunk (at least `floor`).
template <class Opens>
std::vector<int> most_held(const PipelineSchedule& sch, int stage, Opens opens, int floor) {
  const int v = sch.spec.virtual_stages, m = sch.spec.micro_batches;
  std::vector<int> live(v, 0), most(v, floor);
  std::vector<char> held(static_cast<size_t>(m) * v, 0);
  for (const PpOp& op : sch.stages[stage].ops) {
    char& h = held[static_cast<size_t>(op.mb) * v + op.chunk];
    if (opens(op) && !h) {
      h = 1;
      most[op.chunk] = std::max(most[op.chunk], ++live[op.chunk]);
    } else if (op.kind == PpOpKind::kBackward && h) {
      h = 0;
      live[op.chunk]--;
    }
  }
  return most;
}
}  // namespace

std::vector<int> activation_slots_needed(const PipelineSchedule& sch, int stage) {
  return most_held(sch, stage, [](const PpOp& op) {
    return op.kind == PpOpKind::kForward || (op.kind == PpOpKind::kPostRecv && op.payload == Payload::kActivation);
  }, 1);
}

PipelineStage::PipelineStage(std::vector<GPT*> chunks, Communicator* pp, const PipelineSchedule& sch, int B, int T,
                             bool decoupled)
    : chunks_(std::move(chunks)), pp_(pp), sch_(sch), P_(sch.spec.stages), stage_(pp ? pp->rank() : 0),
      m_(sch.spec.micro_batches), B_(B), T_(T), decoupled_(decoupled) {
  const int v = sch.spec.virtual_stages;
  MS_CHECK(static_cast<int>(chunks_.size()) == v, "pipeline: {} model chunks for {} virtual stages", chunks_.size(), v);
  MS_CHECK(P_ == 1 || (pp && pp->size() == P_), "pipeline: the pp group has {} ranks, the schedule {} stages",
           pp ? pp->size() : 0, P_);
  const std::vector<int> need = activation_slots_needed(sch_, stage_);
  for (int c = 0; c < v; c++) {
    MS_CHECK(chunks_[c]->activation_slots() >= need[c], "pipeline: chunk {} has {} activation slots, the schedule "
             "needs {}", c, chunks_[c]->activation_slots(), need[c]);
    free_slots_.emplace_back();
    for (int k = chunks_[c]->activation_slots(); k-- > 0;) free_slots_.back().push_back(k);
  }
  first_ = chunks_.front()->has_embedding();
  last_ = chunks_.back()->has_head();
  rows_ = static_cast<size_t>(chunks_[0]->local_rows(B, T));
  C_ = static_cast<size_t>(chunks_[0]->config().n_embd);
  slot_.assign(static_cast<size_t>(m_) * v, -1);
  recvs_.resize(2 * static_cast<size_t>(m_) * v);
  sends_.resize(2 * static_cast<size_t>(m_) * v);
  // Received output gradients: as many buffers per chunk as the schedule has receives posted and
  // not yet consumed by their backward (receives are posted one computation ahead).
  const std::vector<int> most = most_held(sch_, stage_, [](const PpOp& op) {
    return op.kind == PpOpKind::kPostRecv && op.payload == Payload::kGradient;
  }, 0);
  on_ = stream_order_of(*chunks_[0]);
  grad_in_.resize(v);
  grad_free_.resize(v);
  grad_buf_.assign(static_cast<size_t>(m_) * v, -1);
  for (int c = 0; c < v; c++) {
    grad_in_[c].resize(static_cast<size_t>(most[c]) * rows_ * C_, on_.device);
    for (int k = most[c]; k-- > 0;) grad_free_[c].push_back(k);
  }
  const int S = sch.spec.send_slots;
  send_buf_.resize(2 * v);
  send_free_.resize(2 * v);
  for (int i = 0; i < 2 * v; i++) {
    if (P_ > 1) send_buf_[i].resize(static_cast<size_t>(S) * rows_ * C_, on_.device);
    for (int k = S; k-- > 0;) send_free_[i].push_back(k);
  }
  // "forward 3.1" / "backward 3.1" (micro-batch.chunk): the compute spans of the trace.
  for (int kind = 0; kind < 2; kind++)
    for (int mb = 0; mb < m_; mb++)
      for (int c = 0; c < v; c++)
        span_names_.push_back(intern_name((kind == 0 ? "forward " : "backward ") + std::to_string(mb) + "." +
                                          std::to_string(c)));
  if (first_ || last_) {
    inputs_.resize(static_cast<size_t>(m_) * B * T);
    targets_.resize(static_cast<size_t>(m_) * B * T);
  }
}

PipelineStage::~PipelineStage() {
  // The comm thread must not write into (or read from) freed buffers.
  for (auto* list : {&recvs_, &sends_})
    for (Inflight& f : *list) {
      if (!f.active) continue;
      try {
        f.work.wait();
      } catch (const std::exception&) {
        // Already failing: whoever waited first reported it.
      }
    }
}

uint32_t PipelineStage::tag(Payload p, int mb, int g) const {
  // Fits MPI's smallest tag bound (32767); per (peer, tag) channel messages match in post order.
  const int G = P_ * sch_.spec.virtual_stages;
  const int wrap = std::max(1, 16384 / G);
  return static_cast<uint32_t>(((mb % wrap) * G + g) * 2 + (p == Payload::kGradient ? 1 : 0));
}

PipelineStage::Inflight& PipelineStage::recv_of(Payload p, int mb, int c) {
  const size_t v = chunks_.size();
  return recvs_[((p == Payload::kGradient ? 1 : 0) * static_cast<size_t>(m_) + mb) * v + c];
}

int PipelineStage::take_slot(int mb, int c) {
  int& s = slot_of(mb, c);
  if (s < 0) {
    MS_CHECK(!free_slots_[c].empty(), "pipeline: chunk {} has no free activation slot for micro-batch {}", c, mb);
    s = free_slots_[c].back();
    free_slots_[c].pop_back();
  }
  return s;
}

void PipelineStage::fetch_tokens(int mb, const Tokens& tokens) {
  const size_t N = static_cast<size_t>(B_) * T_;
  while (fetched_ <= mb) {
    TraceScope span("data");
    tokens(fetched_, inputs_.data() + fetched_ * N, targets_.data() + fetched_ * N);
    fetched_++;
  }
}

double PipelineStage::wait(Inflight& f, const char* what) {
  MS_CHECK(f.active, "pipeline: {} that was never posted", what);
  f.active = false;
  return wait_timed(f.work, what, on_);
}

void PipelineStage::post_recv(const PpOp& op) {
  Inflight& f = recv_of(op.payload, op.mb, op.chunk);
  MS_CHECK(!f.active, "pipeline: receive {} posted twice", to_string(op));
  float* buf;
  if (op.payload == Payload::kActivation) {
    buf = chunks_[op.chunk]->input_buffer(take_slot(op.mb, op.chunk));
  } else {
    MS_CHECK(!grad_free_[op.chunk].empty(), "pipeline: chunk {} has no free gradient buffer for {}", op.chunk,
             to_string(op));
    int& b = grad_buf_[static_cast<size_t>(op.mb) * chunks_.size() + op.chunk];
    b = grad_free_[op.chunk].back();
    grad_free_[op.chunk].pop_back();
    buf = grad_in_[op.chunk].data() + static_cast<size_t>(b) * rows_ * C_;
  }
  f.work = pp_->start_recv(buf, rows_ * C_ * sizeof(float), op.peer, tag(op.payload, op.mb, global_chunk(op.chunk)),
                           on_);
  f.active = true;
}

void PipelineStage::post_send(const PpOp& op) {
  const int p = op.payload == Payload::kGradient ? 1 : 0;
  const size_t v = chunks_.size();
  Inflight& f = sends_[(p * static_cast<size_t>(m_) + op.mb) * v + op.chunk];
  std::vector<int>& free = send_free_[p * v + op.chunk];
  MS_CHECK(!f.active && !free.empty(), "pipeline: send {} has no free buffer", to_string(op));
  f.buffer = free.back();
  free.pop_back();
  float* buf = send_buf_[p * v + op.chunk].data() + static_cast<size_t>(f.buffer) * rows_ * C_;
  const GPT& chunk = *chunks_[op.chunk];
  const float* src = op.payload == Payload::kActivation ? chunk.output() : chunk.input_grad();
  chunk.kernels().copy(buf, src, rows_ * C_);
  const int g = global_chunk(op.chunk);
  const int consumer = op.payload == Payload::kActivation ? g + 1 : g - 1;
  f.work = pp_->start_send(buf, rows_ * C_ * sizeof(float), op.peer, tag(op.payload, op.mb, consumer), on_);
  f.active = true;
}

void PipelineStage::wait_send(const PpOp& op) {
  const int p = op.payload == Payload::kGradient ? 1 : 0;
  const size_t v = chunks_.size();
  Inflight& f = sends_[(p * static_cast<size_t>(m_) + op.mb) * v + op.chunk];
  wait_s_ += wait(f, "pp wait send");
  send_free_[p * v + op.chunk].push_back(f.buffer);
  f.buffer = -1;
}

double PipelineStage::run_step(float dloss, const Tokens& tokens, const BeforeBackward& before_backward) {
  wait_s_ = compute_s_ = 0;
  fetched_ = 0;
  const size_t N = static_cast<size_t>(B_) * T_;
  double loss = 0;
  const int G = P_ * sch_.spec.virtual_stages;
  for (const PpOp& op : sch_.stages[stage_].ops) {
    switch (op.kind) {
      case PpOpKind::kPostRecv: post_recv(op); break;
      case PpOpKind::kPostSend:
        post_send(op);
        if (!decoupled_) unwaited_.push_back(op);
        break;
      case PpOpKind::kWaitSend:
        if (decoupled_) wait_send(op);
        break;
      case PpOpKind::kForward: {
        GPT& chunk = *chunks_[op.chunk];
        const int g = global_chunk(op.chunk);
        chunk.select_slot(take_slot(op.mb, op.chunk));
        if (g > 0) wait_s_ += wait(recv_of(Payload::kActivation, op.mb, op.chunk), "pp wait recv activation");
        wait_paired_sends();
        const bool first = g == 0, head = g == G - 1;
        if (first || head) fetch_tokens(op.mb, tokens);
        const std::string_view name = span_name(op);
        const Stopwatch w;
        TraceScope span(name);
        const float l = chunk.forward(first ? inputs_.data() + op.mb * N : nullptr,
                                      head ? targets_.data() + op.mb * N : nullptr, B_, T_, dloss);
        if (head) loss += l;
        compute_s_ += w.seconds();
        break;
      }
      case PpOpKind::kBackward: {
        GPT& chunk = *chunks_[op.chunk];
        const int g = global_chunk(op.chunk);
        int& slot = slot_of(op.mb, op.chunk);
        MS_CHECK(slot >= 0, "pipeline: backward {} before its forward", to_string(op));
        chunk.select_slot(slot);
        const float* dout = nullptr;
        int& gb = grad_buf_[static_cast<size_t>(op.mb) * chunks_.size() + op.chunk];
        if (g < G - 1) {
          wait_s_ += wait(recv_of(Payload::kGradient, op.mb, op.chunk), "pp wait recv gradient");
          dout = grad_in_[op.chunk].data() + static_cast<size_t>(gb) * rows_ * C_;
        }
        wait_paired_sends();
        if (before_backward) before_backward(op.chunk, op.mb);
        const std::string_view name = span_name(op);
        const Stopwatch w;
        {
          TraceScope span(name);
          chunk.backward(dout);
        }
        compute_s_ += w.seconds();
        free_slots_[op.chunk].push_back(slot);
        slot = -1;
        if (gb >= 0) grad_free_[op.chunk].push_back(gb), gb = -1;
        break;
      }
    }
  }
  wait_paired_sends();
  return loss;
}

void PipelineStage::wait_paired_sends() {
  for (const PpOp& op : unwaited_) wait_send(op);
  unwaited_.clear();
}

double PipelineStage::run_forward_only(int m, const Tokens& tokens) {
  const size_t bytes = rows_ * C_ * sizeof(float);
  const int v = static_cast<int>(chunks_.size()), G = P_ * v;
  double loss = 0;
  for (int mb = 0; mb < m; mb++)
    for (int c = 0; c < v; c++) {
      GPT& chunk = *chunks_[c];
      const int g = global_chunk(c);
      chunk.select_slot(0);
      if (g > 0) pp_->recv(chunk.input_buffer(0), bytes, (g - 1) % P_, tag(Payload::kActivation, mb, g), on_);
      const bool first = g == 0, head = g == G - 1;
      if (first || head) tokens(mb, inputs_.data(), targets_.data());
      const float l = chunk.forward(first ? inputs_.data() : nullptr, head ? targets_.data() : nullptr, B_, T_, 0.0f);
      if (head) loss += l;
      else pp_->send(chunk.output(), bytes, (g + 1) % P_, tag(Payload::kActivation, mb, g + 1), on_);
    }
  return loss;
}

}  // namespace ms
