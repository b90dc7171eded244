// launch_cli: see launch_cli.h.
#include "launch_cli.h"

#include <CLI/CLI.hpp>

#include "base/check.h"  // MS_CHECK
#include "app_paths.h"  // resolve_launch_command, default_dashboard_dir, self_executable

namespace ms {

namespace {
// The hidden subcommand the driver starts on each host, and the self-check's (selfcheck_tool.cpp):
// the library takes both as commands (DriverOptions.tools).
constexpr const char* kExecutorCommand = "executor";
constexpr const char* kSelfCheckCommand = "selfcheck";
}  // namespace

void add_launch_commands(CLI::App& app, LaunchArgs& a) {
  LaunchOptions& opt = a.single;
  launch::DriverOptions& d = a.driver;
  CLI::App* cmd = app.add_subcommand(
      "launch", "start the ranks of a command (a megascale subcommand, or a path) with rendezvous env: N local ranks "
                "(--nproc), or a driven job with an executor per host, heartbeats and automatic restart (--hosts)");
  auto* nproc = cmd->add_option("-n,--nproc", opt.nproc, "number of local ranks (1..1024), without --hosts")->check(CLI::Range(1, 1024));
  auto* hosts = cmd->add_option("--hosts", a.hosts, "driver mode: hosts, one executor each, e.g. localhost*3 or a,b,c "
                                "(localhost entries run on this machine); NAME=ADDRESS binds the ranks of host NAME to "
                                "ADDRESS (or NAME=auto: the address on the host's interface), e.g. h1=10.0.0.1");
  nproc->excludes(hosts);
  cmd->add_option("--nproc-per-host", d.nproc_per_host, "driver mode: ranks per host")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--spare-hosts", d.spare_hosts, "driver mode: the last K hosts wait as spares for excluded ones")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--host-launcher", d.host_launcher, "driver mode: 'local', or a command prefix with {host} that runs "
                  "the executor on a host (e.g. \"ssh -o BatchMode=yes {host}\", \"srun -N1 -n1 -w {host}\")")->capture_default_str();
  cmd->add_option("--store", a.store, "rendezvous store: 'file' (a private folder), 'redis' (a redis-server started for "
                  "the launch, random password) or redis://host:port (password in MEGASCALE_STORE_PASSWORD or the file "
                  "MEGASCALE_STORE_PASSWORD_FILE); driver mode default: file on one machine, else redis")->capture_default_str();
  cmd->add_option("--run-dir", opt.run_dir, "folder for the launch's temporary files (default: the temporary folder)");
  cmd->add_option("--log-dir", d.log_dir, "driver mode: folder for events.jsonl and summary.json "
                  "(default: ./megascale-launch/job-<id>)");
  cmd->add_flag("--quiet-others", opt.quiet_others, "forward only rank 0's stdout (stderr of every rank is kept)");
  cmd->add_option("--heartbeat", d.heartbeat_s, "driver mode: seconds between an executor's heartbeats")
      ->check(CLI::Range(0.05, 60.0))->capture_default_str();
  cmd->add_option("--heartbeat-timeout", d.heartbeat_timeout_s, "driver mode: a host without a heartbeat this long is lost")
      ->check(CLI::Range(0.2, 3600.0))->capture_default_str();
  cmd->add_option("--stall-factor", a.stall_factor, "driver mode: a hang is no step for this many median step times...")
      ->check(CLI::Range(1.0, 1000.0))->capture_default_str();
  cmd->add_option("--stall-min", a.stall_min_s, "driver mode: ...but never less than this many seconds")
      ->check(CLI::Range(0.5, 86400.0))->capture_default_str();
  cmd->add_option("--startup-timeout", a.startup_s, "driver mode: seconds an attempt may take to its first step")
      ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  cmd->add_option("--traffic-timeout", d.traffic_timeout_s, "driver mode: seconds without collective traffic that count "
                  "as a hang (0 = off)")->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("--loss-window", d.loss_window, "driver mode: steps in the loss-spike window")->check(CLI::Range(2, 100000))->capture_default_str();
  cmd->add_option("--loss-z", d.loss_z, "driver mode: z-score of a loss spike (0 = off)")->check(CLI::Range(0.0, 1e6))->capture_default_str();
  cmd->add_option("--loss-spike-action", a.loss_spike_action, "driver mode: warn or restart")
      ->check(CLI::IsMember({"warn", "restart"}))->capture_default_str();
  cmd->add_option("--max-restarts", d.max_restarts, "driver mode: restarts before giving up")->check(CLI::Range(0, 100000))->capture_default_str();
  cmd->add_option("--same-failure-limit", d.same_failure_limit, "driver mode: the same failure (kind, rank, step) this many "
                  "times in a row ends the job")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_flag("!--no-selfcheck", d.selfcheck, "driver mode: skip the self-checks before a restart");
  cmd->add_flag("!--no-standby", a.standby, "driver mode: no warm standby processes of a `train` command on the hosts "
                "(restarts and spares then start fresh processes)");
  cmd->add_option("--selfcheck-margin", d.selfcheck_gemm_margin, "driver mode: a host whose GEMM speed or own all-reduce "
                  "bandwidth is below (1 - margin) x the hosts' median fails")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--selfcheck-timeout", d.selfcheck_timeout_s, "driver mode: seconds a self-check round may take")
      ->check(CLI::Range(1.0, 3600.0))->capture_default_str();
  cmd->add_option("--stop-grace", a.stop_grace_s, "driver mode: seconds between the recovery stop signal and SIGKILL")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  cmd->add_option("--signal-grace", a.signal_grace_s, "seconds the ranks get to save and exit after SIGTERM/SIGINT")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  // One value per occurrence: a repeatable option takes every word up to the next option by default,
  // so `--error-pattern X -- /bin/sh -c ...` swallowed the command.
  cmd->add_option("--error-pattern", d.error_patterns, "driver mode: a regular expression for rank lines reported as "
                  "errors (repeatable; replaces the defaults)")->allow_extra_args(false);
  cmd->add_option("--warning-pattern", d.warning_patterns, "driver mode: the same for warnings")->allow_extra_args(false);
  cmd->add_option("--dashboard-port", opt.dashboard_port, "port of the live dashboard (page, /api/status, /metrics): "
                  "0 = a free port (printed), negative = no dashboard")->capture_default_str();
  cmd->add_option("--dashboard-bind", opt.dashboard_bind, "address the dashboard listens on")->capture_default_str();
  cmd->add_option("--dashboard-linger", opt.dashboard_linger_s, "keep serving the dashboard this many seconds after "
                  "the launch ended (--nproc mode)")->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("command", opt.command, "after --: a megascale subcommand and its arguments, or a path "
                  "starting with / or ./ and its arguments")->required();

  launch::ExecutorOptions& e = a.executor;
  CLI::App* ex = app.add_subcommand(kExecutorCommand, "one host's agent of a driven job (started by `launch --hosts`)")->group("");
  ex->add_option("--host-index", e.host)->required();
  ex->add_option("--address", e.address);
  ex->add_option("--beat-ms", a.executor_beat_ms)->check(CLI::Range(10, 600000));
  ex->add_option("--run-dir", e.run_dir);
  ex->add_option("--error-pattern", e.error_patterns);
  ex->add_option("--warning-pattern", e.warning_patterns);
}

int run_launch_command(CLI::App& app, LaunchArgs& a) {
  if (app.got_subcommand(kExecutorCommand)) {
    launch::ExecutorOptions e = a.executor;
    e.beat = std::chrono::milliseconds(a.executor_beat_ms);
    e.janitor = janitor_command();
    if (e.error_patterns.empty()) e.error_patterns = launch::default_error_patterns();
    if (e.warning_patterns.empty()) e.warning_patterns = launch::default_warning_patterns();
    return launch::run_executor(e);
  }
  if (!app.got_subcommand("launch")) return -1;
  LaunchOptions& s = a.single;
  s.command = resolve_launch_command(s.command);
  s.janitor = janitor_command();
  s.dashboard_assets = default_dashboard_dir();
  s.signal_grace = std::chrono::milliseconds((int64_t)(a.signal_grace_s * 1000));
  // Flags with a fixed set of values are parsed here, once: the library compares kinds, not words.
  const bool store_given = app.get_subcommand("launch")->count("--store") > 0;
  s.store = launch::parse_store_spec(a.store);
  if (a.hosts.empty()) {
    CLI::App* cmd = app.get_subcommand("launch");
    MS_CHECK(cmd->count("--nproc") > 0, "launch needs --nproc N (ranks on this machine) or --hosts HOSTS (driver mode)");
    return run_launcher(s).exit_code;
  }
  launch::DriverOptions d = a.driver;
  d.hosts = a.hosts;
  d.command = s.command;
  const std::string exe = self_executable();
  d.tools.executor = {exe, kExecutorCommand};
  d.tools.selfcheck = {exe, kSelfCheckCommand};
  d.tools.janitor = janitor_command();
  d.store = store_given ? s.store : launch::StoreSpec{};  // not given: auto
  d.loss_spike_action = launch::parse_loss_spike_action(a.loss_spike_action);
  d.run_dir = s.run_dir;
  d.quiet_others = s.quiet_others;
  // Standbys only of this binary's `train` (it waits for its assignment: launch/standby.h).
  d.standby = a.standby && s.command.size() >= 2 && s.command[0] == exe && s.command[1] == "train";
  d.stall = {a.stall_factor, a.stall_min_s, a.startup_s};
  d.stop_grace = std::chrono::milliseconds((int64_t)(a.stop_grace_s * 1000));
  d.signal_grace = s.signal_grace;
  d.dashboard_port = s.dashboard_port;
  d.dashboard_bind = s.dashboard_bind;
  d.dashboard_assets = s.dashboard_assets;
  return launch::run_driver(d).exit_code;
}

}  // namespace ms
