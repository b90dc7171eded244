// pipeline_stage: runs one stage's table of a pipeline schedule (pp_schedule.h) over this stage's
// model chunks. The model chunks know nothing of the pipeline: the stage writes a received
// activation into a chunk's input buffer, hands a received gradient to its backward, and sends
// what a chunk produced (its output, or the gradient of its input) to the neighbouring stage.
// Guarantees:
//  - Decoupled send/recv (MegaScale §3.2): every send and every receive is its own asynchronous op
//    on the pp group with its own handle; a computation waits only on the receive it consumes, a
//    send is waited on only when its buffer is reused (send_slots buffers per direction and chunk)
//    or at the end of the step. Messages are matched by a tag naming the payload, the micro-batch
//    and the receiving chunk.
//  - Micro-batches in flight keep their activations in the chunk's activation slots
//    (activation_slots_needed() gives how many each chunk needs for a schedule).
//  - Tokens are asked for in micro-batch order, once per micro-batch, and only on the stages that
//    use them (the first chunk reads inputs, the last chunk targets); the loss (sum over the step's
//    micro-batches, in micro-batch order) exists on the last stage only.
//  - One stage (P = 1) runs F0 B0 F1 B1 ... on one chunk: exactly the single-process loop.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "base/aligned.h"              // AlignedBuffer
#include "base/device_array.h"         // DeviceArray
#include "comm/communicator.h"         // Communicator, CommWork
#include "parallel/pp/pp_schedule.h"   // PipelineSchedule

namespace ms {

class GPT;

// How many activation slots each local chunk of `stage` needs: the most micro-batches whose forward
// has started (or whose input receive is posted) and whose backward has not yet run.
std::vector<int> activation_slots_needed(const PipelineSchedule& sch, int stage);

class PipelineStage {
 public:
  // chunks: local chunk c is global chunk c*P + stage (P = sch.spec.stages); pp: the pipeline group
  // (group rank = stage; nullptr when P == 1). B, T: micro-batch shape. Not owned.
  // decoupled = false pairs each send with the next receive (Megatron's send_forward_recv_backward):
  // the sends posted since the last computation are waited on together with the receive the next
  // computation needs, before it starts (to measure what decoupling hides).
  PipelineStage(std::vector<GPT*> chunks, Communicator* pp, const PipelineSchedule& sch, int B, int T,
                bool decoupled = true);
  ~PipelineStage();  // waits for sends and receives still in flight (after a failure)

  // tokens(mb, inputs, targets): fills micro-batch mb's B*T ids each (called in mb order on the stages
  // holding the first or the last chunk). before_backward(chunk, mb): right before that backward.
  using Tokens = std::function<void(int mb, int* inputs, int* targets)>;
  using BeforeBackward = std::function<void(int chunk, int mb)>;
  // One step: every forward and backward of the schedule, dloss = 1/(rows of the whole step).
  // Returns the sum over micro-batches of the mean loss (last stage; 0 on the others).
  double run_step(float dloss, const Tokens& tokens, const BeforeBackward& before_backward);
  // Forward only over m micro-batches (evaluation), one after another through the stages (blocking
  // sends and receives, in (micro-batch, chunk) order on every stage; any m, tokens(mb, ...) once per
  // micro-batch on the stages that use them). Returns the loss sum (last stage).
  double run_forward_only(int m, const Tokens& tokens);

  // Of the last run_step: seconds spent waiting on receives and sends, and computing.
  double wait_seconds() const { return wait_s_; }
  double compute_seconds() const { return compute_s_; }
  bool needs_tokens() const { return first_ || last_; }
  const PipelineSchedule& schedule() const { return sch_; }

 private:
  struct Inflight {   // a posted receive or send
    CommWork work;
    int buffer = -1;  // send: index into its ring
    bool active = false;
  };
  uint32_t tag(Payload p, int mb, int global_chunk) const;
  int global_chunk(int c) const { return c * P_ + stage_; }
  int& slot_of(int mb, int c) { return slot_[static_cast<size_t>(mb) * chunks_.size() + c]; }
  Inflight& recv_of(Payload p, int mb, int c);
  int take_slot(int mb, int c);
  void fetch_tokens(int mb, const Tokens& tokens);
  void post_recv(const PpOp& op);
  void post_send(const PpOp& op);
  void wait_send(const PpOp& op);
  double wait(Inflight& f, const char* what);
  void wait_paired_sends();  // decoupled = false: the sends posted since the last computation
  std::string_view span_name(const PpOp& op) const {
    return span_names_[((op.kind == PpOpKind::kForward ? 0 : 1) * static_cast<size_t>(m_) + op.mb) * chunks_.size() + op.chunk];
  }

  std::vector<GPT*> chunks_;
  Communicator* pp_;
  PipelineSchedule sch_;
  int P_, stage_, m_, B_, T_;
  size_t rows_ = 0, C_ = 0;  // n x C: one activation (or gradient) message, in floats
  bool first_ = false, last_ = false;  // holds global chunk 0 / the last chunk
  bool decoupled_ = true;
  std::vector<PpOp> unwaited_;  // decoupled = false: sends posted, waited on before the next computation
  std::vector<std::vector<int>> free_slots_;   // per chunk
  std::vector<int> slot_;                      // (mb, chunk) -> activation slot, -1 = none
  std::vector<Inflight> recvs_, sends_;        // per (payload, mb, chunk)
  StreamOrder on_;  // the chunks' device and compute stream: every send/recv is ordered on it
  std::vector<DeviceArray<float>> grad_in_;  // per chunk: received output gradients (a few messages)
  std::vector<std::vector<int>> grad_free_;    // per chunk: free message indices of grad_in_
  std::vector<int> grad_buf_;                  // (mb, chunk) -> its gradient message, -1 = none
  std::vector<DeviceArray<float>> send_buf_; // per (payload, chunk): send_slots messages
  std::vector<std::vector<int>> send_free_;    // per (payload, chunk): free ring indices
  std::vector<int> inputs_, targets_;          // the step's micro-batches (m x B*T)
  std::vector<std::string_view> span_names_;  // per (forward/backward, mb, chunk), interned
  int fetched_ = 0;
  double wait_s_ = 0, compute_s_ = 0;
};

}  // namespace ms
