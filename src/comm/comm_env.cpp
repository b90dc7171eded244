// comm_env.cpp: see comm_env.h.
#include "comm/comm_env.h"

#include <arpa/inet.h>  // inet_ntop
#include <ifaddrs.h>    // getifaddrs
#include <net/if.h>     // IFF_UP, IFF_LOOPBACK
#include <netinet/in.h> // sockaddr_in

#include <charconv>  // std::from_chars
#include <cstdlib>   // std::getenv
#include <cstring>   // std::strlen
#include <initializer_list>

#include "base/check.h"  // MS_CHECK

namespace ms {

namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_env_int(const char* name, const char* value, int min_value) {
  int out = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, out);
  MS_CHECK(ec == std::errc() && p == end && out >= min_value,
           "environment variable {}='{}' is not an integer >= {}", name, value, min_value);
  return out;
}

// The first of `names` that is set, parsed; `fallback` when none is.
int first_env_int(std::initializer_list<const char*> names, int min_value, int fallback) {
  for (const char* n : names)
    if (const char* v = env_or_null(n)) return parse_env_int(n, v, min_value);
  return fallback;
}

// Tasks per node of an srun step: the leading integer of SLURM_STEP_TASKS_PER_NODE such as "2(x3),1"
// (the step's first node); 1 when it is not set.
int slurm_tasks_per_node() {
  const char* value = env_or_null("SLURM_STEP_TASKS_PER_NODE");
  if (!value) return 1;
  int out = 0;
  auto [p, ec] = std::from_chars(value, value + std::strlen(value), out);
  MS_CHECK(ec == std::errc() && p != value && out >= 1,
           "environment variable SLURM_STEP_TASKS_PER_NODE='{}' does not start with a task count", value);
  return out;
}

}  // namespace

std::string first_interface_address() {
  ifaddrs* list = nullptr;
  MS_CHECK(::getifaddrs(&list) == 0, "MEGASCALE_HOST=auto: getifaddrs failed");
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text))
      found = text;
  }
  ::freeifaddrs(list);
  MS_CHECK(!found.empty(), "MEGASCALE_HOST=auto: this host has no IPv4 interface that is up besides loopback; set "
           "MEGASCALE_HOST to the address the ranks should use");
  return found;
}

CommEnv CommEnv::from_environment() {
  CommEnv env;
  if (const char* b = env_or_null("MEGASCALE_BACKEND")) {
    env.backend = b;
    MS_CHECK(env.backend == "gloo" || env.backend == "mpi" || env.backend == "nccl" || env.backend == "self",
             "environment variable MEGASCALE_BACKEND='{}' is not one of gloo, mpi, nccl, self", env.backend);
  } else if (env_or_null("OMPI_COMM_WORLD_SIZE") || env_or_null("PMIX_RANK")) {
    env.backend = "mpi";
  } else if (env_or_null("WORLD_SIZE")) {
    env.backend = "gloo";
  } else if (env_or_null("SLURM_STEP_ID") && first_env_int({"SLURM_NTASKS"}, 1, 1) > 1) {
    env.backend = "gloo";  // a task of an srun step without PMIx (srun --mpi=none)
  } else {
    env.backend = "self";
  }
  if (env.backend == "mpi") {
    env.rank = first_env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"}, 0, 0);
    // 0: not in the environment; make_mpi_world takes the size from MPI itself.
    env.world_size = first_env_int({"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1, 0);
    env.local_rank = first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0, 0);
    env.local_world_size = first_env_int({"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 0);
    // srun --mpi=pmix: Slurm says how many tasks share the node.
    if (env.local_world_size == 0) env.local_world_size = slurm_tasks_per_node();
  } else if (!env_or_null("WORLD_SIZE") && env_or_null("SLURM_STEP_ID")) {
    // Gloo under srun: the task's place from Slurm; its host's address found on its own interface.
    env.rank = first_env_int({"SLURM_PROCID"}, 0, 0);
    env.world_size = first_env_int({"SLURM_NTASKS"}, 1, 1);
    env.local_rank = first_env_int({"SLURM_LOCALID"}, 0, 0);
    env.local_world_size = slurm_tasks_per_node();
    env.hostname = "auto";
    if (const char* job = env_or_null("SLURM_JOB_ID"))
      env.run_id = std::string("slurm-") + job + "." + env_or_null("SLURM_STEP_ID");
    MS_CHECK(env.rank < env.world_size, "environment variable SLURM_PROCID={} is not below SLURM_NTASKS={}", env.rank,
             env.world_size);
  } else {
    env.rank = first_env_int({"RANK"}, 0, 0);
    env.world_size = first_env_int({"WORLD_SIZE"}, 1, 1);
    env.local_rank = first_env_int({"LOCAL_RANK"}, 0, env.rank);
    env.local_world_size = first_env_int({"LOCAL_WORLD_SIZE"}, 1, env.world_size);
    MS_CHECK(env.rank < env.world_size, "environment variable RANK={} is not below WORLD_SIZE={}", env.rank,
             env.world_size);
  }
  if (const char* v = env_or_null("MEGASCALE_STORE")) env.store = v;
  if (const char* v = env_or_null("MEGASCALE_STORE_PASSWORD")) env.store_password = v;
  if (const char* v = env_or_null("MEGASCALE_RUN_ID")) env.run_id = v;
  if (const char* v = env_or_null("MEGASCALE_HOST")) env.hostname = v;
  if (env.hostname == "auto") env.hostname = first_interface_address();
  // The driver's host index, else (in an srun step) Slurm's node.
  env.host_index = first_env_int({"MEGASCALE_HOST_INDEX"}, 0,
                                 env_or_null("SLURM_STEP_ID") ? first_env_int({"SLURM_NODEID"}, 0, -1) : -1);
  return env;
}

}  // namespace ms
