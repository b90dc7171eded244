#!/usr/bin/env bash
# emulated_cluster.sh: N emulated hosts on this machine, for tests and for trying multi-host training
# on one box. Runs COMMAND inside an outer network namespace of its own, where:
#   - a bridge (address SUBNET.254, the "head node" where COMMAND runs) joins N hosts;
#   - each host is a network namespace named by its address, SUBNET.1 .. SUBNET.N, with one veth
#     link to the bridge, shaped in both directions to RATE (tc tbf; e.g. 1gbit, 10gbit; "none" off);
#   - with --redis, a redis-server runs on host SUBNET.1 (port 6379) with a random password;
#   - with --slurm, a Slurm cluster: munged and slurmctld on the head node, one slurmd per host in
#     the host's namespace (node hI at SUBNET.I, partition "emu"); srun / sbatch work from COMMAND.
# The outer namespace has no route off the machine: no packet can leave it. Everything (links,
# namespaces, Redis, every process started inside) goes away when COMMAND exits, also on failure or
# when this script is killed with SIGKILL: the cluster lives in a PID namespace whose first process
# is this script, and unshare --kill-child ends it with the wrapper.
# COMMAND sees:
#   MS_CLUSTER_HOSTS      the hosts' addresses, comma-separated (megascale launch --hosts)
#   MS_CLUSTER_LAUNCHER   "ip netns exec {host}" (megascale launch --host-launcher)
#   MS_CLUSTER_STORE      redis://SUBNET.1:6379 with --redis (megascale launch --store)
#   MEGASCALE_STORE_PASSWORD  its password, with --redis
#   MS_CLUSTER_SELF       this script (for `link` / `flap` below)
#   SLURM_CONF            with --slurm: the cluster's slurm.conf (node names h1 .. hN)
# Inside a cluster (from COMMAND):
#   emulated_cluster.sh link HOST down|up   take a host's link down or up (its processes keep running)
#   emulated_cluster.sh flap HOST SECONDS   down, sleep, up
#   emulated_cluster.sh rsh HOST COMMAND... run a command line inside a host (mpirun's rsh agent:
#     mpirun --mca plm_rsh_agent "$MS_CLUSTER_SELF rsh" --host A:2,B:2 --mca btl tcp,self
#            --mca btl_tcp_if_include SUBNET.0/24 --mca oob_tcp_if_include SUBNET.0/24
#            --mca rtc_hwloc_vmhole none ...: the orteds of several hosts share this machine's memory)
# Usage: scripts/emulated_cluster.sh [--hosts N] [--rate RATE] [--subnet A.B.C] [--redis] [--slurm] -- COMMAND [ARGS...]
# Example (README, "Multi-host on one machine"):
#   scripts/emulated_cluster.sh --hosts 2 --rate 1gbit --redis -- sh -c 'build/megascale launch \
#     --hosts "$MS_CLUSTER_HOSTS" --nproc-per-host 2 --host-launcher "$MS_CLUSTER_LAUNCHER" \
#     --store "$MS_CLUSTER_STORE" -- train configs/brown.toml --parallel.dp=2 --parallel.pp=2'
# Needs root, or unprivileged user namespaces (then it maps the caller to root inside); iproute2
# (ip, tc), redis-server for --redis, slurm-wlm and munge for --slurm. Exit status: COMMAND's, or 2 for a usage or set-up error.
set -euo pipefail

die() { echo "emulated_cluster.sh: $*" >&2; exit 2; }

# ---- inside a cluster: link control ----
host_link() {  # the bridge-side veth of host address $1
  local last="${1##*.}"
  [[ "$last" =~ ^[0-9]+$ ]] && ip link show "v$last" >/dev/null 2>&1 || die "no emulated host '$1' here"
  echo "v$last"
}
case "${1:-}" in
  link)
    [ "${MS_CLUSTER_INNER:-}" = 1 ] || die "link: run it from inside a cluster (COMMAND's environment)"
    [ $# -eq 3 ] && { [ "$3" = down ] || [ "$3" = up ]; } || die "usage: link HOST down|up"
    ip link set "$(host_link "$2")" "$3"
    exit 0 ;;
  rsh)  # mpirun's plm_rsh_agent: rsh HOST COMMAND... runs COMMAND (a shell line) inside the host
    [ $# -ge 3 ] || die "usage: rsh HOST COMMAND..."
    h="$2"; shift 2
    exec ip netns exec "$h" sh -c "$*" ;;
  flap)
    [ "${MS_CLUSTER_INNER:-}" = 1 ] || die "flap: run it from inside a cluster (COMMAND's environment)"
    [ $# -eq 3 ] || die "usage: flap HOST SECONDS"
    dev=$(host_link "$2")
    ip link set "$dev" down; sleep "$3"; ip link set "$dev" up
    exit 0 ;;
esac

hosts=2 rate=1gbit subnet=10.77.0 redis=0 slurm=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    --redis) redis=1; shift ;;
    --slurm) slurm=1; shift ;;
    --) shift; break ;;
    *) die "unknown option '$1' (usage: --hosts N --rate RATE --subnet A.B.C --redis -- COMMAND)" ;;
  esac
done
[ $# -gt 0 ] || die "no COMMAND after --"
[[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] || die "--hosts $hosts: must be 1..200"
[[ "$subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet $subnet: must be three octets, e.g. 10.77.0"
[[ "$rate" = none || "$rate" =~ ^[0-9]+(k|m|g)?bit$ ]] || die "--rate $rate: must be e.g. 100mbit, 1gbit, 10gbit or none"

# ---- outside: re-run this script as the first process of a fresh network + mount + PID namespace ----
if [ "${MS_CLUSTER_INNER:-}" != 1 ]; then
  command -v unshare >/dev/null && command -v ip >/dev/null || die "needs unshare (util-linux) and ip (iproute2)"
  user=()
  [ "$(id -u)" = 0 ] || user=(--user --map-root-user)
  exec unshare "${user[@]}" --net --mount --pid --fork --kill-child --mount-proc \
    env MS_CLUSTER_INNER=1 bash "$0" --hosts "$hosts" --rate "$rate" --subnet "$subnet" \
    $([ "$redis" = 1 ] && echo --redis) $([ "$slurm" = 1 ] && echo --slurm) -- "$@"
fi

# ---- inside: build the cluster ----
mount --make-rprivate / 2>/dev/null || true
mkdir -p /run/netns && mount -t tmpfs tmpfs /run/netns  # this mount namespace's own netns folder
ip link set lo up
ip link add br0 type bridge
ip addr add "$subnet.254/24" dev br0
ip link set br0 up
# tbf needs a bucket of at least one timer tick of traffic: 1 ms worth of the rate, at least 64 KiB.
shape() {  # dev [netns]
  [ "$rate" = none ] && return 0
  local n="${rate%bit}" mult=1
  case "$n" in *k) mult=1000; n=${n%k} ;; *m) mult=1000000; n=${n%m} ;; *g) mult=1000000000; n=${n%g} ;; esac
  local burst=$(( n * mult / 8 / 1000 )); [ "$burst" -lt 65536 ] && burst=65536
  ${2:+ip netns exec "$2"} tc qdisc add dev "$1" root tbf rate "$rate" burst "$burst" latency 10ms
}
list=""
for i in $(seq 1 "$hosts"); do
  h="$subnet.$i"
  ip netns add "$h"
  ip link add "v$i" type veth peer name "e$i"
  ip link set "e$i" netns "$h"
  ip netns exec "$h" ip link set lo up
  ip netns exec "$h" ip addr add "$h/24" dev "e$i"
  ip netns exec "$h" ip link set "e$i" up
  ip link set "v$i" master br0 up
  shape "v$i"        # to the host
  shape "e$i" "$h"   # from the host
  list="${list:+$list,}$h"
done
export MS_CLUSTER_HOSTS="$list" MS_CLUSTER_LAUNCHER="ip netns exec {host}" MS_CLUSTER_SELF="$(readlink -f "$0")"
if [ "$redis" = 1 ]; then
  command -v redis-server >/dev/null || die "--redis: redis-server is not installed"
  pw=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  dir=$(mktemp -d)
  ip netns exec "$subnet.1" redis-server --bind "$subnet.1" --port 6379 --requirepass "$pw" --save '' \
    --appendonly no --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
  for _ in $(seq 1 50); do
    ip netns exec "$subnet.1" redis-cli -h "$subnet.1" -a "$pw" --no-auth-warning ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  export MS_CLUSTER_STORE="redis://$subnet.1:6379" MEGASCALE_STORE_PASSWORD="$pw"
fi
# Slurm: munged + slurmctld on the head node, slurmd hI inside host I (each in its own namespace, so all
# listen on the same port); state, spool and logs in a private folder.
start_slurm() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null || die "--slurm: slurm-wlm and munge are not installed"
  local d; d=$(mktemp -d /tmp/emu-slurm.XXXXXX); chmod 0755 "$d"
  mkdir -p "$d/state" "$d/spool" "$d/tmp" "$d/munge"; chmod 0755 "$d/munge"
  munged --force --socket="$d/munge/munge.sock" --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge/seed" || die "--slurm: munged did not start"
  # Emulated nodes share this machine's cores: each says it has 64 CPUs (config_overrides keeps slurmd
  # from draining it for the difference), so tests and benchmarks may start more tasks than cores.
  local cpus=64
  {
    echo "ClusterName=emu"
    echo "SlurmctldHost=$(hostname -s)($subnet.254)"  # slurmctld must find its own host name here
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$d/munge/munge.sock"
    echo "CredType=cred/munge"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "ReturnToService=2"
    echo "MpiDefault=none"
    echo "StateSaveLocation=$d/state"
    echo "SlurmdSpoolDir=$d/spool/%n"
    echo "TmpFS=$d/tmp/%n"
    echo "SlurmctldPidFile=$d/slurmctld.pid"
    echo "SlurmdPidFile=$d/slurmd-%n.pid"
    echo "SlurmctldLogFile=$d/slurmctld.log"
    echo "SlurmdLogFile=$d/slurmd-%n.log"
    echo "SlurmctldPort=6817"
    echo "SlurmdPort=6818"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SlurmdParameters=config_overrides"
    for i in $(seq 1 "$hosts"); do echo "NodeName=h$i NodeAddr=$subnet.$i CPUs=$cpus State=UNKNOWN"; done
    echo "PartitionName=emu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } > "$d/slurm.conf"
  export SLURM_CONF="$d/slurm.conf"
  slurmctld -f "$SLURM_CONF" || die "--slurm: slurmctld did not start (see $d/slurmctld.log)"
  for i in $(seq 1 "$hosts"); do
    mkdir -p "$d/spool/h$i" "$d/tmp/h$i"
    # nsenter, not ip netns exec: slurmd needs the machine's /sys (cgroups), which ip netns exec remounts.
    nsenter --net="/run/netns/$subnet.$i" slurmd -f "$SLURM_CONF" -N "h$i" || die "--slurm: slurmd h$i did not start (see $d)"
  done
  local up=0
  for _ in $(seq 1 100); do
    up=$(sinfo -h -N -o '%T' 2>/dev/null | grep -c -E '^(idle|mixed|allocated)' || true)
    [ "$up" -ge "$hosts" ] && break
    sleep 0.1
  done
  [ "$up" -ge "$hosts" ] || die "--slurm: only $up of $hosts slurmd node(s) came up (logs in $d)"
}
[ "$slurm" = 1 ] && start_slurm
echo "emulated_cluster.sh: $hosts host(s) $list, links ${rate}, head node $subnet.254${MS_CLUSTER_STORE:+, store $MS_CLUSTER_STORE}${SLURM_CONF:+, slurm nodes h1..h$hosts}" >&2
set +e
"$@"
exit $?
