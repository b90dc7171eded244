// pp_simulate.cpp: see pp_simulate.h.
#include "parallel/pp/pp_simulate.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "base/check.h"  // MS_CHECK, MS_FAIL

namespace ms {

PpMessage sent_message(const PipelineSchedule& sch, int stage, const PpOp& op) {
  return {op.payload, op.mb, sch.global_chunk(stage, op.chunk), op.peer};
}

PpMessage received_message(const PipelineSchedule& sch, int stage, const PpOp& op) {
  const int g = sch.global_chunk(stage, op.chunk);
  return {op.payload, op.mb, op.payload == Payload::kActivation ? g - 1 : g + 1, stage};
}

bool consumed_message(const PipelineSchedule& sch, int stage, const PpOp& op, PpMessage& msg) {
  const int g = sch.global_chunk(stage, op.chunk), G = sch.num_chunks();
  if (op.kind == PpOpKind::kForward && g > 0) {
    msg = {Payload::kActivation, op.mb, g - 1, stage};
    return true;
  }
  if (op.kind == PpOpKind::kBackward && g < G - 1) {
    msg = {Payload::kGradient, op.mb, g + 1, stage};
    return true;
  }
  return false;
}

void check_schedule(const PipelineSchedule& sch) {
  const int P = sch.spec.stages, v = sch.spec.virtual_stages, m = sch.spec.micro_batches;
  MS_CHECK(static_cast<int>(sch.stages.size()) == P, "schedule: {} stage lists for {} stages", sch.stages.size(), P);
  std::map<PpMessage, int> sends, recvs;  // key -> count
  std::map<std::tuple<int, int, Payload>, std::vector<PpMessage>> send_order, recv_order;  // (from, to, payload)
  for (int s = 0; s < P; s++) {
    std::map<std::pair<int, int>, int> fwd, bwd;  // (mb, chunk) -> position
    std::set<PpMessage> posted, waited;
    const auto& ops = sch.stages[s].ops;
    for (int i = 0; i < static_cast<int>(ops.size()); i++) {
      const PpOp& op = ops[i];
      MS_CHECK(op.mb >= 0 && op.mb < m && op.chunk >= 0 && op.chunk < v, "schedule: stage {} op {} ({}) is outside "
               "{} micro-batches x {} chunks", s, i, to_string(op), m, v);
      switch (op.kind) {
        case PpOpKind::kForward:
          MS_CHECK(fwd.emplace(std::pair{op.mb, op.chunk}, i).second, "schedule: stage {} runs {} twice", s, to_string(op));
          break;
        case PpOpKind::kBackward:
          MS_CHECK(fwd.count({op.mb, op.chunk}), "schedule: stage {} runs {} before its forward", s, to_string(op));
          MS_CHECK(bwd.emplace(std::pair{op.mb, op.chunk}, i).second, "schedule: stage {} runs {} twice", s, to_string(op));
          break;
        case PpOpKind::kPostSend: {
          const PpMessage k = sent_message(sch, s, op);
          sends[k]++;
          posted.insert(k);
          send_order[{s, op.peer, op.payload}].push_back(k);
          break;
        }
        case PpOpKind::kPostRecv: {
          const PpMessage k = received_message(sch, s, op);
          MS_CHECK(op.peer == (std::get<2>(k) % P + P) % P, "schedule: stage {} receives {} from stage {}, which does "
                   "not hold the sending chunk", s, to_string(op), op.peer);
          recvs[k]++;
          recv_order[{op.peer, s, op.payload}].push_back(k);
          break;
        }
        case PpOpKind::kWaitSend: {
          const PpMessage k = sent_message(sch, s, op);
          MS_CHECK(posted.count(k), "schedule: stage {} waits on {} before posting it", s, to_string(op));
          MS_CHECK(waited.insert(k).second, "schedule: stage {} waits on {} twice", s, to_string(op));
          break;
        }
      }
    }
    MS_CHECK(static_cast<int>(fwd.size()) == m * v && static_cast<int>(bwd.size()) == m * v,
             "schedule: stage {} runs {} forwards and {} backwards, want {} each", s, fwd.size(), bwd.size(), m * v);
    MS_CHECK(waited == posted, "schedule: stage {} leaves {} of its {} sends unwaited at the end", s,
             posted.size() - waited.size(), posted.size());
  }
  for (const auto& [k, n] : sends)
    MS_CHECK(n == 1 && recvs.count(k) && recvs.at(k) == 1, "schedule: a send (mb {}, chunk {}) to stage {} is posted {} "
             "time(s) and received {} time(s)", std::get<1>(k), std::get<2>(k), std::get<3>(k), n,
             recvs.count(k) ? recvs.at(k) : 0);
  for (const auto& [k, n] : recvs)
    MS_CHECK(sends.count(k), "schedule: stage {} receives (mb {}, from chunk {}) that no stage sends", std::get<3>(k),
             std::get<1>(k), std::get<2>(k));
  for (const auto& [ch, order] : send_order)
    MS_CHECK(recv_order[ch] == order, "schedule: stage {} sends {} to stage {} in another order than it receives them",
             std::get<0>(ch), std::get<2>(ch) == Payload::kActivation ? "activations" : "gradients", std::get<1>(ch));
}

SimResult simulate_schedule(const PipelineSchedule& sch, Buffering buffering) {
  const int P = sch.spec.stages;
  std::set<PpMessage> sends_posted, recvs_posted;
  std::vector<size_t> pc(P, 0);
  SimResult r;
  for (;;) {
    bool progress = false, done = true;
    for (int s = 0; s < P; s++) {
      const auto& ops = sch.stages[s].ops;
      while (pc[s] < ops.size()) {
        const PpOp& op = ops[pc[s]];
        bool ready = true;
        PpMessage k;
        switch (op.kind) {
          case PpOpKind::kPostSend: sends_posted.insert(sent_message(sch, s, op)); break;
          case PpOpKind::kPostRecv: recvs_posted.insert(received_message(sch, s, op)); break;
          case PpOpKind::kForward:
          case PpOpKind::kBackward:
            if (consumed_message(sch, s, op, k)) ready = recvs_posted.count(k) && sends_posted.count(k);
            break;
          case PpOpKind::kWaitSend:
            k = sent_message(sch, s, op);
            ready = sends_posted.count(k) && (buffering == Buffering::kUnbounded || recvs_posted.count(k));
            break;
        }
        if (!ready) break;
        pc[s]++;
        progress = true;
      }
      if (pc[s] < ops.size()) done = false;
    }
    r.rounds++;
    if (done) return r;
    if (!progress) {
      r.deadlock = true;
      for (int s = 0; s < P; s++)
        if (pc[s] < sch.stages[s].ops.size())
          r.stuck += (r.stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + " at " +
                     to_string(sch.stages[s].ops[pc[s]]) + " (op " + std::to_string(pc[s]) + ")";
      return r;
    }
  }
}

}  // namespace ms
