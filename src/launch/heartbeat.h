// heartbeat: the messages between the driver and its executors (launch-internal;
// docs/reliability.md "Driver and executors"). The channel is the executor's stdin (driver ->
// executor commands) and stdout (executor -> driver reports), one JSON object per line, so it works
// the same for a local child, over `ssh` or under `srun` (whatever the host launcher runs the
// executor with forwards stdin/stdout). The store password travels in a `run` command on this
// channel, never on a command line or in a log.
// Executor -> driver (`type`):
//   hello     once at start: host index, hostname, pid, usable cores
//   beat      every heartbeat interval and at once when a local rank ends: HostBeat below
//   line      a line a local rank wrote on stdout (the driver prints it "[rank k] ...")
//   selfcheck the results of one self-check round: SelfCheckReport below
// Driver -> executor (`cmd`):
//   run       start the local ranks of one attempt: RunCommand below
//   standby   keep warm rank processes of this command waiting (standby.h): StandbyCommand below
//   selfcheck start self-check processes: SelfCheckCommand below
//   stop      end the local ranks: `signal` ("USR1": dump where you are and exit, no save; "TERM":
//             save at the next step boundary and exit), then SIGKILL after `grace_ms`
//   exit      end everything and exit 0
// Guarantees: every field has a default, so a message from a newer peer with more fields or an
// older one with fewer parses; a line that is not a JSON object is an ms::Error naming the line.
#pragma once
#include <cmath>  // NAN
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms::launch {

// One local rank as the executor last saw it (its process and its record files).
struct RankBeat {
  int rank = -1;                 // world rank of this attempt
  int64_t pid = 0;
  std::string state = "starting";  // starting, running, exited, killed
  int exit_code = -1;            // exited: its code
  int signal = 0;                // killed: the signal
  int step = 0;                  // last step completed (from its step records; 0 = none yet)
  double loss = NAN;             // last known loss (NaN where the rank does not know it)
  double tokens_per_s = NAN;
  double step_ms = NAN;          // wall time of its last step
  std::map<std::string, double> ms;  // the last step's segment times (wall ms)
  bool warm = false;             // started from a standby process (standby.h), not a fresh process
};

// A step the executor saw complete on one of its ranks that knows the loss (the driver's curves,
// the loss-spike detector and the effective-training-time count).
struct StepBeat {
  int rank = -1, step = 0;
  double loss = NAN;             // NaN where the rank does not know it
  double step_ms = 0;
};

// A rank's log line that matched a pattern (error / warning / fault).
struct LogLineBeat {
  int rank = -1;
  std::string level;  // "error", "warning" or "fault" (an injected fault announcing itself)
  std::string text;
};

struct HostBeat {
  int host = -1;
  uint64_t seq = 0;
  int attempt = -1;              // the attempt the ranks belong to (-1: none started)
  std::string state = "idle";    // idle, running, stopping, stopped, selfcheck
  std::string hostname;
  int64_t pid = 0;               // the executor's
  std::vector<RankBeat> ranks;
  std::vector<StepBeat> steps;   // new since the last beat
  int64_t bytes_sent = 0, bytes_recv = 0;  // collective / p2p payload bytes of the local ranks since the last beat
  std::vector<LogLineBeat> lines;          // new since the last beat
  std::string out_dir;           // the run's folder (from the local ranks' run.json), once known
  std::string error;             // the executor's own trouble (a record file it cannot read, ...)
  std::vector<int64_t> standby;  // pids of the warm standby processes waiting for a rank (standby.h)
};

struct RunCommand {
  int attempt = 0;
  int world = 1;
  std::vector<int> ranks;        // the world ranks this host runs, one process each, in local-rank order
  std::vector<std::string> argv; // the rank command
  std::map<std::string, std::string> env;  // added to every rank's environment (store, run id, password, ...)
  bool quiet = false;            // forward only rank 0's stdout
};

// Keep `count` warm processes of `argv` waiting (standby.h): the next `run` of the same argv hands
// them its ranks' environment instead of starting processes. Sent to every executor, spares too;
// count 0 ends the standbys.
struct StandbyCommand {
  std::vector<std::string> argv;
  int count = 0;
};

// One self-check process: its argv and extra environment; its result file is passed as --out.
struct SelfCheckProc {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

struct SelfCheckCommand {
  int id = 0;
  std::vector<SelfCheckProc> procs;
  int timeout_ms = 60000;        // SIGKILL after this (a check must not hang the recovery)
};

struct SelfCheckResult {
  int exit_code = -1;            // 0 pass, 3 a check failed, else an error / signal (128 + s)
  nlohmann::json result;         // the process's JSON result (null when it wrote none)
};

struct SelfCheckReport {
  int host = -1, id = 0;
  std::vector<SelfCheckResult> results;  // one per SelfCheckCommand::procs, same order
};

void to_json(nlohmann::json& j, const RankBeat& b);
void from_json(const nlohmann::json& j, RankBeat& b);
void to_json(nlohmann::json& j, const StepBeat& b);
void from_json(const nlohmann::json& j, StepBeat& b);
void to_json(nlohmann::json& j, const LogLineBeat& b);
void from_json(const nlohmann::json& j, LogLineBeat& b);
void to_json(nlohmann::json& j, const HostBeat& b);
void from_json(const nlohmann::json& j, HostBeat& b);
void to_json(nlohmann::json& j, const RunCommand& c);
void from_json(const nlohmann::json& j, RunCommand& c);
void to_json(nlohmann::json& j, const StandbyCommand& c);
void from_json(const nlohmann::json& j, StandbyCommand& c);
void to_json(nlohmann::json& j, const SelfCheckProc& c);
void from_json(const nlohmann::json& j, SelfCheckProc& c);
void to_json(nlohmann::json& j, const SelfCheckCommand& c);
void from_json(const nlohmann::json& j, SelfCheckCommand& c);
void to_json(nlohmann::json& j, const SelfCheckResult& r);
void from_json(const nlohmann::json& j, SelfCheckResult& r);
void to_json(nlohmann::json& j, const SelfCheckReport& r);
void from_json(const nlohmann::json& j, SelfCheckReport& r);

// Splits a byte stream into lines (the channel's framing).
class LineReader {
 public:
  // Reads what is available on a non-blocking fd; returns false at end of file (or a read error).
  bool read_from(int fd);
  // The next complete line (without '\n'), if any.
  bool next(std::string& line);

 private:
  std::string buf_;
  size_t start_ = 0;
};

// Parses one channel line into a JSON object; an ms::Error names `who` and quotes the line.
nlohmann::json parse_message(std::string_view line, std::string_view who);
// One message as its channel line (without the '\n'; invalid UTF-8 replaced).
std::string encode_message(const nlohmann::json& msg);
// Writes one message (a JSON object and '\n') to fd in full. Returns false when the reader is gone
// (EPIPE); throws ms::Error on other errors.
bool send_message(int fd, const nlohmann::json& msg);

}  // namespace ms::launch
