// scale_cost: the costs of a step that grow with the number of devices and hosts, from their
// mechanism rather than a factor per scale (issue 38):
//  - stragglers: every step ends when the slowest of the N devices that synchronise in it is done;
//    with each device's compute in a step spread as a normal with relative deviation cv (the
//    cluster's jitter, straggler_cv), the expected wait over the mean is compute x cv x E[max of N
//    standard normals], E computed by quadrature (0 for one device; 1/sqrt(pi) for two; ~sqrt(2 ln N)
//    for large N);
//  - the network above one switch: a data-parallel ring whose hosts do not all sit under one switch
//    set (hosts_per_switch) crosses the fat tree's upper tiers, where ECMP hashes its flows onto
//    shared uplinks (collisions: spine_eta, the share of the link a flow keeps) and an oversubscribed
//    tree divides the bandwidth (oversubscription); the ring runs at its slowest link, so the whole
//    collective sees the contended bandwidth. Under one switch set neither applies.
// Pure arithmetic; unit-tested against closed forms (test_scale_cost).
#pragma once
#include "plan/comm_cost.h"  // Link

namespace ms::plan {

// E[max of n independent standard normals] (n >= 1).
double expected_max_std_normal(int n);

// The expected wait for the slowest of n devices whose per-step compute `compute_s` spreads with
// relative deviation cv: compute_s x cv x expected_max_std_normal(n).
double straggler_seconds(double compute_s, double cv, int n);

// Hosts a data-parallel group spans in the trainer's rank order (tp innermost, then dp: its members
// sit tp devices apart): ceil(dp x tp / devices_per_node), at least 1 and at most dp.
int dp_group_hosts(int tp, int dp, int devices_per_node);

// The link a data-parallel ring over `hosts` hosts runs at: `nic` itself under one switch set
// (hosts <= hosts_per_switch), else its bandwidth x spine_eta / oversubscription.
Link dp_ring_link(const Link& nic, int hosts, int hosts_per_switch, double spine_eta, double oversubscription);

}  // namespace ms::plan
