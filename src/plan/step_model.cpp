// step_model.cpp: see step_model.h.
#include "plan/step_model.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "parallel/pp/pp_schedule.h"
#include "plan/host_memory.h"  // host_memory
#include "plan/model_math.h"
#include "plan/scale_cost.h"

namespace ms::plan {

namespace {

using ChunkCost = ChunkTimes;  // per micro-batch; tp: the exposed TP communication

Link intra_link(const ClusterDesc& c, const PlanConstants& k) {
  return {c.node.intra_GBps * 1e9, c.node.intra_latency_us * 1e-6, k.intra_eta, k.intra_half_bytes};
}
Link nic_link(const ClusterDesc& c, const PlanConstants& k) {
  return {c.nic_Bps_per_device(), c.network.inter_latency_us * 1e-6, k.nic_eta, k.nic_half_bytes};
}

double coll_seconds(Collective kind, double bytes, int n, const Link& link) {
  if (kind == Collective::kAllGather || kind == Collective::kReduceScatter)
    return ring_all_gather_seconds(bytes, n, link);
  if (kind == Collective::kAllReduce) return all_reduce_seconds(bytes, n, link);
  return 0;
}

// The GEMM a collective feeds or drains: the next one after a region's entry, else the one before.
int adjacent_gemm(const std::vector<PlanOp>& ops, size_t i) {
  const bool entry = ops[i].fwd_coll == Collective::kAllGather || ops[i].name.find("-in") != std::string::npos ||
                     ops[i].name == "ag-for-wgrad";
  if (entry)
    for (size_t j = i + 1; j < ops.size(); j++)
      if (ops[j].cls == OpClass::kGemm) return static_cast<int>(j);
  for (size_t j = i; j-- > 0;)
    if (ops[j].cls == OpClass::kGemm) return static_cast<int>(j);
  return -1;
}

// `recomputable`: the transformer layers' ops (recomputation never repeats the embedding or the head).
ChunkCost chunk_cost(const std::vector<PlanOp>& ops, const PlanLayout& l, const ClusterDesc& c, const PlanConstants& k,
                     const Link& tp_link, bool recomputable) {
  ChunkCost r;
  const DeviceEfficiency& e = k.device;
  std::vector<double> f(ops.size()), b(ops.size());
  for (size_t i = 0; i < ops.size(); i++) {
    f[i] = op_seconds(ops[i], false, l.precision, c, e), b[i] = op_seconds(ops[i], true, l.precision, c, e);
    r.fwd += f[i], r.bwd += b[i];
    if (recomputable && (l.recompute == Recompute::kFull ||
                         (l.recompute == Recompute::kSelective && ops[i].cls == OpClass::kAttention)))
      r.recompute += f[i];
  }
  const double K = std::max(1, l.tp_chunks);
  for (size_t i = 0; i < ops.size(); i++) {
    const PlanOp& op = ops[i];
    if (op.cls != OpClass::kCollective || l.tp == 1) continue;
    const int g = adjacent_gemm(ops, i);
    const bool mlp = g >= 0 && (ops[g].name == "fc1" || ops[g].name == "fc2" || op.name == "block-in");
    double gf = g >= 0 ? f[g] : 0, gb = g >= 0 ? b[g] : 0;
    if (op.name == "block-in")  // the parallel block's gather feeds QKV and FC1, one fused GEMM in MegaScale
      for (size_t j = i + 1; j < ops.size() && ops[j].name != "block-out"; j++)
        if (ops[j].name == "fc1") gf += f[j], gb += b[j];
    const double cf = coll_seconds(op.fwd_coll, op.coll_bytes, l.tp, tp_link);
    const double cb = coll_seconds(op.bwd_coll, op.coll_bytes, l.tp, tp_link);
    double xf = cf, xb = cb;
    if (l.overlap_tp && mlp) {
      if (cf > 0) xf = cf / K + std::max(0.0, cf - gf) + (K - 1) * e.launch_s;
      if (cb > 0) xb = cb / K + std::max(0.0, cb - gb) + (K - 1) * e.launch_s;
    } else if ((l.overlap_tp_bwd || l.overlap_tp) && cb > 0) {
      xb = std::max(0.0, cb - gb / 2);  // beside the weight-gradient half of the GEMM's backward
    }
    r.fwd += xf, r.bwd += xb, r.tp += xf + xb;
    if (recomputable && l.recompute == Recompute::kFull)
      r.recompute += xf, r.tp += xf;  // the forward's collectives again
  }
  r.bwd += r.recompute;
  return r;
}

void check_layout(const ModelConfig& m, const PlanLayout& l) {
  MS_CHECK(l.tp >= 1 && l.pp >= 1 && l.dp >= 1 && l.micro_batch >= 1 && l.global_batch >= 1 && l.seq >= 1,
           "plan: tp {}, pp {}, dp {}, micro-batch {}, global batch {}, seq {}: each must be >= 1", l.tp, l.pp, l.dp,
           l.micro_batch, l.global_batch, l.seq);
  MS_CHECK(l.global_batch % (l.dp * l.micro_batch) == 0,
           "plan: global batch {} is not a multiple of dp {} x micro-batch {}", l.global_batch, l.dp, l.micro_batch);
  MS_CHECK(m.n_head % l.tp == 0, "plan: {} heads do not split over tp {}", m.n_head, l.tp);
}

}  // namespace

PlanConstants plan_constants(const ClusterDesc& c) {
  PlanConstants k;
  auto set = [&](const char* key, double& field, double scale = 1.0) {
    if (const auto it = c.efficiency.find(key); it != c.efficiency.end()) field = it->second * scale;
  };
  set("gemm_eta_inf", k.device.gemm_eta_inf);
  set("gemm_k_half", k.device.gemm_k_half);
  set("attention_eta", k.device.attention_eta);
  set("flash_eta", k.device.flash_eta);
  set("mem_eta", k.device.mem_eta);
  set("launch_us", k.device.launch_s, 1e-6);
  set("intra_eta", k.intra_eta);
  set("nic_eta", k.nic_eta);
  set("intra_half_MB", k.intra_half_bytes, 1024.0 * 1024.0);
  set("nic_half_MB", k.nic_half_bytes, 1024.0 * 1024.0);
  set("optimizer_bytes_per_param", k.optimizer_bytes_per_param);
  set("host_sync_s", k.host_sync_s);
  set("host_async_s", k.host_async_s);
  set("overlap_gamma", k.overlap_gamma);
  set("straggler_cv", k.straggler_cv);
  set("spine_eta", k.spine_eta);
  return k;
}

MemoryLayout memory_layout_of(const PlanLayout& l) {
  MemoryLayout ml;
  ml.tp = l.tp, ml.pp = l.pp, ml.dp = l.dp, ml.virtual_stages = l.virtual_stages, ml.micro_batch = l.micro_batch;
  ml.micro_batches = l.global_batch / (l.dp * l.micro_batch), ml.sequence_parallel = l.sequence_parallel;
  ml.recompute = l.recompute, ml.zero = l.zero, ml.flash_attention = l.attention == AttentionImpl::kFlash;
  ml.weight_bytes = l.element_bytes();
  return ml;
}

namespace {

// A CPU host's view of one rank (host_cost.h): threads as the trainer picks them, all ranks on the host.
HostRank host_rank(const PlanLayout& l, const ClusterDesc& c) {
  HostRank r;
  const int ranks = l.tp * l.pp * l.dp, cores = c.device.cores;
  r.precision = l.precision, r.tp = l.tp, r.backend = l.comm_backend;
  r.threads = l.threads > 0 ? l.threads : std::max(1, cores / ranks);
  r.slowdown = std::max(1.0, static_cast<double>(ranks) * r.threads / cores);
  return r;
}

}  // namespace

double zero2_overlap_exposed(const PipelineTimeline& tl, int chunks, double rs_chunk, double ag_chunk) {
  const int stages = static_cast<int>(tl.compute_s.size());
  double worst = 0;
  for (int s = 0; s < stages; s++) {
    std::vector<double> last_bwd(chunks, 0), first_fwd(chunks, tl.step_s);
    for (const SimSpan& x : tl.spans) {
      if (x.stage != s) continue;
      if (x.kind == PpOpKind::kBackward) last_bwd[x.chunk] = std::max(last_bwd[x.chunk], x.t0);
      if (x.kind == PpOpKind::kForward) first_fwd[x.chunk] = std::min(first_fwd[x.chunk], x.t1);
    }
    std::sort(last_bwd.begin(), last_bwd.end());
    double nic = 0;
    for (double ready : last_bwd) nic = std::max(nic, ready) + rs_chunk;
    std::sort(first_fwd.begin(), first_fwd.end());
    double ag_nic = 0, late = 0;
    for (double need : first_fwd) ag_nic += ag_chunk, late = std::max(late, ag_nic - need);
    worst = std::max(worst, std::max(0.0, nic - tl.step_s) + late);
  }
  return worst;
}

namespace {

// Data parallelism's exposed time, the optimizer and the host, added to the pipeline's.
void add_data_parallel(const ModelConfig& m, const PlanLayout& l, const ClusterDesc& c, const PlanConstants& k,
                       StepPrediction& p) {
  const GptShape shape = shape_of(m, l.seq);
  const MemoryLayout ml = memory_layout_of(l);
  const double P = std::max(stage_params(shape, ml, 0), stage_params(shape, ml, l.pp - 1));
  const double v = l.virtual_stages, local = l.zero >= 1 ? P / l.dp : P;
  if (c.device.kind == "cpu") {  // fp32 buckets reduce-scattered, parameters all-gathered: CPU work
    const HostRank r = host_rank(l, c);
    const double grad_bytes = 4.0 * P, buckets = std::max(1.0, std::ceil(grad_bytes / (l.bucket_mb * 1048576.0)));
    const double rs = buckets * c.host.collective_seconds(l.comm_backend, "reduce_scatter", grad_bytes / buckets, l.dp);
    const double ag = c.host.collective_seconds(l.comm_backend, "all_gather", grad_bytes, l.dp);
    // The tied embedding's token rows (ZeRO-2's split, a row of C floats and an id per token).
    const double rows = static_cast<double>(l.global_batch) / l.dp * l.seq * (m.n_embd + 1) * 4.0 * l.dp;
    p.dp_exposed = l.dp > 1 ? rs + ag + c.host.collective_seconds(l.comm_backend, "all_gather", rows, l.dp) : 0;
    // The pipeline's tied-embedding sum between the first and the last stage.
    if (l.pp > 1)
      p.pp_exposed +=
          c.host.collective_seconds(l.comm_backend, "all_reduce", 4.0 * m.padded_vocab() * m.n_embd / l.tp, 2);
    p.optimizer = c.host.optimizer_seconds(local, l.lamb, r.threads) * r.slowdown;
    p.other = 0;
    return;
  }
  // DP's exposed time over a link; the ring over the group's hosts as the network carries it, less
  // the same over the NIC as one switch set would, is what the upper tiers cost (spine).
  auto dp_exposed = [&](const Link& nic) {
    double rs = 0, ag = 0;
    if (l.zero >= 1) {
      rs = v * ring_reduce_scatter_seconds(l.grad_reduce_bytes() * P / v, l.dp, nic);
      ag = v * ring_all_gather_seconds(l.element_bytes() * P / v, l.dp, nic);
    } else {
      rs = v * all_reduce_seconds(l.grad_reduce_bytes() * P / v, l.dp, nic);
    }
    const double exposed =
        l.overlap_dp ? zero2_overlap_exposed(p.timeline, l.virtual_stages, rs / v, ag / v) : rs + ag;
    // What hides under compute still slows it: the collectives' kernels take SMs and memory bandwidth.
    return exposed + k.overlap_gamma * std::max(0.0, rs + ag - exposed);
  };
  const Link nic = nic_link(c, k);
  p.dp_exposed = dp_exposed(nic);
  const int hosts = dp_group_hosts(l.tp, l.dp, c.node.devices_per_node);
  if (l.dp > 1 && hosts > c.network.hosts_per_switch)
    p.spine = std::max(0.0, dp_exposed(dp_ring_link(nic, hosts, c.network.hosts_per_switch, k.spine_eta,
                                                    c.network.oversubscription)) - p.dp_exposed);
  p.optimizer =
      local * k.optimizer_bytes_per_param * (l.lamb ? 1.25 : 1.0) / (c.device.memory_GBps * 1e9 * k.device.mem_eta);
  p.other = l.data_async ? k.host_async_s : k.host_sync_s;
}

}  // namespace

StepPrediction predict_step(const ModelConfig& m, const PlanLayout& l, const ClusterDesc& c, const PlanConstants& k) {
  check_layout(m, l);
  ScheduleSpec spec;
  spec.kind = l.schedule, spec.stages = l.pp, spec.virtual_stages = l.virtual_stages;
  spec.micro_batches = l.global_batch / (l.dp * l.micro_batch);
  validate_schedule(spec, m.n_layer);
  const PipelineSchedule sch = build_schedule(spec);
  const int chunks = l.pp * l.virtual_stages, per_chunk = m.n_layer / chunks, mb = spec.micro_batches;
  const bool host = c.device.kind == "cpu";
  const HostRank hr = host ? host_rank(l, c) : HostRank{};
  OpGraphOptions o;
  o.seq = l.seq, o.micro_batch = l.micro_batch, o.tp = l.tp, o.sequence_parallel = l.sequence_parallel;
  o.attention = l.attention, o.act_bytes = host ? 4 : l.element_bytes();  // CPU activations stay fp32
  const Link tp_link = l.tp <= c.node.devices_per_node ? intra_link(c, k) : nic_link(c, k);
  auto cost = [&](const std::vector<PlanOp>& ops, bool recomputable) {
    return host ? host_chunk_times(ops, hr, c.host, l.recompute, recomputable)
                : chunk_cost(ops, l, c, k, tp_link, recomputable);
  };
  PipelineCosts costs = PipelineCosts::uniform(spec, 0, 0);
  std::vector<double> recompute(l.pp, 0), tp(l.pp, 0);
  for (int s = 0; s < l.pp; s++)
    for (int v = 0; v < l.virtual_stages; v++) {
      const int g = sch.global_chunk(s, v);
      std::vector<PlanOp> layers;
      for (int layer = g * per_chunk; layer < (g + 1) * per_chunk; layer++) {
        const auto lo = layer_ops(m, layer, o);
        layers.insert(layers.end(), lo.begin(), lo.end());
      }
      ChunkCost cc = cost(layers, /*recomputable=*/true);
      for (const bool first : {true, false}) {
        if (g != (first ? 0 : chunks - 1)) continue;
        const ChunkCost x = cost(first ? embedding_ops(m, o) : head_ops(m, o), false);
        cc.fwd += x.fwd, cc.bwd += x.bwd, cc.tp += x.tp;
      }
      costs.forward[s][v] = cc.fwd, costs.backward[s][v] = cc.bwd;
      recompute[s] += mb * cc.recompute, tp[s] += mb * cc.tp;
    }
  // Point-to-point: one micro-batch's activations (1/t of them with sequence parallelism or scatter/gather).
  const double act = static_cast<double>(l.micro_batch) * l.seq * m.n_embd * o.act_bytes /
                     (l.sequence_parallel || l.pp_scatter_gather ? l.tp : 1);
  const Link pp_link = l.tp * l.pp <= c.node.devices_per_node ? intra_link(c, k) : nic_link(c, k);
  costs.decoupled = l.overlap_pp;
  PipelineCosts free = costs;
  if (l.pp > 1)
    costs.activation_s = costs.gradient_s =
        host ? c.host.collective_seconds(
                   l.comm_backend, c.host.has_collective(l.comm_backend, "all_gather_busy") ? "send_busy" : "send", act,
                   2)
             : p2p_seconds(act, pp_link);
  StepPrediction p;
  p.timeline = simulate_pipeline(sch, costs);
  const PipelineTimeline free_tl = simulate_pipeline(sch, free);
  const int busy = static_cast<int>(std::max_element(free_tl.compute_s.begin(), free_tl.compute_s.end()) -
                                    free_tl.compute_s.begin());
  p.recompute = recompute[busy], p.tp_exposed = tp[busy];
  p.compute = free_tl.compute_s[busy] - p.recompute - p.tp_exposed;
  p.bubble = free_tl.step_s - free_tl.compute_s[busy];
  p.pp_exposed = p.timeline.step_s - free_tl.step_s;
  const double pp_simulated = p.pp_exposed;
  add_data_parallel(m, l, c, k, p);  // may add the tied-embedding sum to pp_exposed
  // Every device meets every other at least once a step (the gradients' reduction, the norm).
  p.straggler = straggler_seconds(free_tl.compute_s[busy], k.straggler_cv, l.tp * l.pp * l.dp);
  p.step_s = p.timeline.step_s + (p.pp_exposed - pp_simulated) + p.dp_exposed + p.optimizer + p.other +
             p.straggler + p.spine;
  const double tokens = static_cast<double>(l.global_batch) * l.seq;
  p.tokens_per_s = tokens / p.step_s;
  // A CPU device is a rank computing with `threads` of the host's cores.
  const double share = host ? std::min(1.0, static_cast<double>(hr.threads) / c.device.cores) : 1.0;
  p.mfu = megatron_flops_per_token(shape_of(m, l.seq)) * p.tokens_per_s /
          (static_cast<double>(l.tp) * l.pp * l.dp * c.peak_flops(l.precision) * share);
  p.memory = host ? host_memory(m, l, c) : estimate_memory(shape_of(m, l.seq), memory_layout_of(l), c);
  return p;
}

}  // namespace ms::plan
