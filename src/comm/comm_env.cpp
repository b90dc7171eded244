// comm_env.cpp: see comm_env.h.
#include "comm/comm_env.h"

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

}  // namespace

CommEnv CommEnv::from_environment() {
  CommEnv env;
  if (const char* b = env_or_null("MEGASCALE_BACKEND")) {
    env.backend = b;
    MS_CHECK(env.backend == "gloo" || env.backend == "mpi" || env.backend == "self",
             "environment variable MEGASCALE_BACKEND='{}' is not one of gloo, mpi, self", env.backend);
  } else if (env_or_null("OMPI_COMM_WORLD_SIZE") || env_or_null("PMIX_RANK")) {
    env.backend = "mpi";
  } else if (env_or_null("WORLD_SIZE")) {
    env.backend = "gloo";
  } else {
    env.backend = "self";
  }
  if (env.backend == "mpi") {
    env.rank = first_env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"}, 0, 0);
    // 0: not in the environment; make_mpi_world takes the size from MPI itself.
    env.world_size = first_env_int({"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1, 0);
    env.local_rank = first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0, 0);
    env.local_world_size = first_env_int({"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 1);
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
  env.host_index = first_env_int({"MEGASCALE_HOST_INDEX"}, 0, -1);
  return env;
}

}  // namespace ms
