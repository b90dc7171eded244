// comm_cost: the time of a collective or a point-to-point transfer under the alpha-beta model the
// planner uses (NCCL's algorithms; nccl-tests' bus-bandwidth definitions): S total bytes, n ranks,
// alpha the per-step latency in seconds, B the effective link bandwidth in bytes per second:
//  - ring all-gather / reduce-scatter: (n-1) alpha + (n-1)/n S/B;
//  - ring all-reduce: 2 (n-1) alpha + 2 (n-1)/n S/B;
//  - tree all-reduce: 2 ceil(log2 n) alpha + 2 S/B; all_reduce_seconds takes the cheaper, as NCCL's
//    tuner does;
//  - point-to-point: alpha + S/B.
// The effective bandwidth saturates with the message size: B(S) = B_link eta_inf S/(S + S_half), S
// being what one step carries (S/n for a ring's steps).
// One rank (n = 1) costs nothing. Pure arithmetic; unit-tested against the closed forms.
#pragma once
#include <cstddef>

namespace ms::plan {

struct Link {
  double bandwidth_Bps = 0;                  // spec bandwidth per direction
  double latency_s = 0;                      // alpha
  double eta_inf = 1.0;                      // large-message efficiency (0, 1]
  double half_bytes = 0;                     // S_half: the message size at which half of eta_inf is reached (0: none)
  double effective_Bps(double bytes) const;  // B(S)
};

double ring_all_gather_seconds(double bytes, int n, const Link& link);
double ring_reduce_scatter_seconds(double bytes, int n, const Link& link);
double ring_all_reduce_seconds(double bytes, int n, const Link& link);
double tree_all_reduce_seconds(double bytes, int n, const Link& link);
double all_reduce_seconds(double bytes, int n, const Link& link);  // min(ring, tree)
double p2p_seconds(double bytes, const Link& link);

// nccl-tests' bus bandwidth of an op that moved `bytes` in `seconds` over n ranks: algbw times
// 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter.
double all_reduce_bus_Bps(double bytes, double seconds, int n);
double all_gather_bus_Bps(double bytes, double seconds, int n);

}  // namespace ms::plan
