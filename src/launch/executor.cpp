// executor: see executor.h. One event loop polls stdin (commands), the signal self-pipe and every
// rank's stdout/stderr; children are reaped with waitpid(WNOHANG) on each wake-up; the record files
// are tailed at each heartbeat.
#include "launch/executor.h"

#include <fcntl.h>       // open, fcntl, O_NONBLOCK
#include <poll.h>        // poll
#include <signal.h>      // kill
#include <sys/prctl.h>   // prctl, PR_SET_PDEATHSIG
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // getpid, gethostname, pipe2, close

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "base/check.h"
#include "base/clock.h"          // SteadyClock
#include "launch/heartbeat.h"
#include "launch/janitor.h"
#include "launch/launcher.h"     // usable_cores, omp_threads_per_rank
#include "launch/output_queue.h"
#include "launch/process.h"
#include "launch/rank_output.h"
#include "launch/signal_forwarding.h"
#include "launch/standby.h"
#include "obs/record_reader.h"   // RecordTail

namespace ms::launch {

namespace fs = std::filesystem;
using Clock = SteadyClock;
using nlohmann::json;

std::vector<std::string> default_error_patterns() {
  return {R"(\berror\b)", R"(\bfatal\b)", "terminate called", "segmentation fault", "non-finite", R"(\bnan\b)",
          "timed out"};
}
std::vector<std::string> default_warning_patterns() { return {R"(\bwarn(ing)?\b)"}; }

namespace {

struct LocalRank {
  int rank = -1, local = 0;  // rank -1: a standby not handed a rank yet
  pid_t pid = -1;
  bool running = false;
  bool forward_out = true;   // its stdout lines go to the driver
  int status = 0;
  RankStream out, err;
  RankBeat beat;
};

// A warm process waiting for its rank (standby.h): stdin_w is the write end of its stdin; omp the
// OMP_NUM_THREADS it started with (the OpenMP runtime reads it once, at load: a rank whose value
// differs starts cold).
struct Standby {
  std::unique_ptr<LocalRank> proc;
  int stdin_w = -1;
  std::string omp;
};

struct Attempt {
  RunCommand cmd;
  std::vector<std::unique_ptr<LocalRank>> ranks;
  std::unique_ptr<RecordTail> tail;
  bool stopping = false, killed = false;
  Clock::time_point kill_at{};
  int running() const {
    int n = 0;
    for (const auto& r : ranks) n += r->running;
    return n;
  }
};

struct SelfCheckRun {
  SelfCheckCommand cmd;
  std::vector<pid_t> pids;
  std::vector<int> status;
  std::vector<bool> done;
  std::vector<std::string> files;
  Clock::time_point deadline{};
};

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

class Executor {
 public:
  explicit Executor(const ExecutorOptions& opt) : opt_(opt), janitor_(opt.janitor) {
    for (const auto& p : opt.error_patterns) errors_.emplace_back(p, std::regex::ECMAScript | std::regex::icase);
    for (const auto& p : opt.warning_patterns) warnings_.emplace_back(p, std::regex::ECMAScript | std::regex::icase);
    const fs::path parent = opt.run_dir.empty() ? fs::temp_directory_path() : fs::path(opt.run_dir);
    dir_ = parent / fmt::format("executor-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
    std::error_code ec;
    fs::create_directories(parent, ec);
    MS_CHECK(fs::create_directory(dir_, ec) && !ec, "cannot create the executor folder {}", dir_.string());
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
    janitor_.watch_path(dir_);
    // The host's memory folder for in-memory checkpoints (tmpfs where there is one): every attempt's
    // ranks get it, so a restarted rank finds the snapshots its predecessor left; removed at the end.
    const fs::path shm = "/dev/shm";
    mem_dir_ = fs::is_directory(shm, ec) ? shm / fmt::format("megascale-mem-{}-{}", ::getpid(),
                                                            Clock::now().time_since_epoch().count())
                                         : dir_ / "memory";
    MS_CHECK(fs::create_directory(mem_dir_, ec) && !ec, "cannot create the memory folder {}", mem_dir_.string());
    fs::permissions(mem_dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
    janitor_.watch_path(mem_dir_);
    devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    MS_SYSCHECK(devnull_ >= 0, "open /dev/null");
    devnull_w_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    MS_SYSCHECK(devnull_w_ >= 0, "open /dev/null");
    chan_ = std::make_unique<OutputQueue>(1, 256 << 10);  // a beat waits behind at most 256 KiB of lines
    err_ = std::make_unique<OutputQueue>(2, 1 << 20, fmt::format("megascale executor {}: ", opt.host));
    beat_.host = opt.host;
    beat_.hostname = hostname();
    beat_.pid = ::getpid();
  }
  ~Executor() {
    kill_everything();
    if (devnull_ >= 0) ::close(devnull_);
    if (devnull_w_ >= 0) ::close(devnull_w_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::remove_all(mem_dir_, ec);
    janitor_.release();
  }

  int run() {
    MS_SYSCHECK(::fcntl(0, F_SETFL, ::fcntl(0, F_GETFL) | O_NONBLOCK) == 0, "fcntl stdin");
    send({{"type", "hello"}, {"host", opt_.host}, {"hostname", beat_.hostname}, {"pid", beat_.pid},
          {"cores", usable_cores()}, {"mem_dir", mem_dir_.string()}});
    next_beat_ = Clock::now();
    LineReader commands;
    std::vector<pollfd> pfds;
    std::vector<RankStream*> owners;
    std::vector<int> owner_rank;
    for (;;) {
      pfds.clear(), owners.clear(), owner_rank.clear();
      pfds.push_back({0, POLLIN, 0});
      pfds.push_back({signals_.fd(), POLLIN, 0});
      auto watch = [&](LocalRank& r) {
        for (RankStream* s : {&r.out, &r.err})
          if (s->fd >= 0) {
            pfds.push_back({s->fd, POLLIN, 0});
            owners.push_back(s);
            owner_rank.push_back(r.rank);
          }
      };
      if (attempt_)
        for (auto& r : attempt_->ranks) watch(*r);
      for (Standby& w : standby_) watch(*w.proc);
      auto wake = next_beat_;
      if (attempt_ && attempt_->stopping && !attempt_->killed) wake = std::min(wake, attempt_->kill_at);
      if (check_) wake = std::min(wake, check_->deadline);
      const auto now = Clock::now();
      const int timeout_ms = (int)std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1, 0, 200);
      const int rc = ::poll(pfds.data(), pfds.size(), timeout_ms);
      MS_SYSCHECK(rc >= 0 || errno == EINTR, "poll");
      if (rc > 0 && (pfds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        const bool open = commands.read_from(0);
        std::string line;
        while (commands.next(line))
          if (!line.empty() && !handle(line)) return 0;
        if (!open) return 0;  // the driver is gone: the destructor ends everything
      }
      for (int sig : signals_.drain()) {
        std::fprintf(stderr, "megascale executor %d: got signal %d; stopping the ranks\n", opt_.host, sig);
        if (attempt_) stop(SIGTERM, std::chrono::milliseconds(120000));
      }
      if (rc > 0)
        for (size_t i = 2; i < pfds.size(); i++)
          if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i - 2], owner_rank[i - 2]);
      const bool ended = reap();
      reap_standbys();
      replenish_standbys();
      if (attempt_ && attempt_->stopping && !attempt_->killed && attempt_->running() > 0 && Clock::now() >= attempt_->kill_at) {
        signal_attempt(SIGKILL);
        attempt_->killed = true;
      }
      poll_checks();
      if (ended || Clock::now() >= next_beat_) {
        beat();
        next_beat_ = Clock::now() + opt_.beat;
      }
    }
  }

 private:
  // Reports go through a queue written by a thread of its own (output_queue.h): the loop never
  // blocks on a driver that does not read. Beats and reports are kept; rank lines dropped when full.
  // A driver that is gone: stdin ends too, and the loop exits on that.
  void send(const json& msg) { chan_->push_kept(encode_message(msg)); }

  // One command line; false: exit.
  bool handle(const std::string& line) {
    try {
      const json j = parse_message(line, "the driver");
      const std::string cmd = j.value("cmd", "");
      if (cmd == "run") start(j.get<RunCommand>());
      else if (cmd == "standby") set_standby(j.get<StandbyCommand>());
      else if (cmd == "stop") {
        const std::string s = j.value("signal", "USR1");
        stop(s == "TERM" ? SIGTERM : s == "KILL" ? SIGKILL : SIGUSR1, std::chrono::milliseconds(j.value("grace_ms", 3000)));
      } else if (cmd == "selfcheck") start_checks(j.get<SelfCheckCommand>());
      else if (cmd == "exit") return false;
      else MS_FAIL("unknown command '{}'", cmd);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "megascale executor %d: %s\n", opt_.host, e.what());
      beat_.error = e.what();
    }
    return true;
  }

  // ---- attempts ------------------------------------------------------------------------------

  void start(const RunCommand& cmd) {
    MS_CHECK(!attempt_ || attempt_->running() == 0, "a run command while attempt {} still runs", attempt_->cmd.attempt);
    if (attempt_) finish_attempt();
    archive_previous(cmd.attempt);
    attempt_ = std::make_unique<Attempt>();
    attempt_->cmd = cmd;
    const fs::path launch_dir = dir_ / fmt::format("attempt-{}", cmd.attempt);
    fs::create_directories(launch_dir);
    // What every rank's environment adds to this executor's (a standby gets it as its assignment).
    std::map<std::string, std::string> add = cmd.env;
    const int n = (int)cmd.ranks.size();
    add["WORLD_SIZE"] = std::to_string(cmd.world);
    add["LOCAL_WORLD_SIZE"] = std::to_string(n);
    add["MEGASCALE_HOST"] = opt_.address;
    add["MEGASCALE_HOST_INDEX"] = std::to_string(opt_.host);
    add["MEGASCALE_RESTART_COUNT"] = std::to_string(cmd.attempt);
    add["MEGASCALE_LAUNCH_DIR"] = launch_dir.string();
    add["MEGASCALE_MEM_DIR"] = mem_dir_.string();
    if (cmd.env.count("OMP_NUM_THREADS") == 0) add["OMP_NUM_THREADS"] = default_omp_threads(n);
    const std::vector<std::string> base = current_environment();
    for (int i = 0; i < n; i++) {
      std::map<std::string, std::string> renv = add;
      renv["RANK"] = std::to_string(cmd.ranks[(size_t)i]);
      renv["LOCAL_RANK"] = std::to_string(i);
      std::unique_ptr<LocalRank> r = take_standby(cmd.argv, renv);
      if (!r) {
        r = std::make_unique<LocalRank>();
        init_streams(*r);
        std::vector<std::string> env = base;
        for (const auto& [k, v] : renv) set_env(env, k, v);
        // stdin /dev/null, a process group of its own, dies with the executor
        r->pid = spawn_with_streams(cmd.argv, env, SpawnOptions{devnull_, -1, -1, true, true}, r->out, r->err);
        janitor_.watch_group(r->pid);
      }
      r->rank = cmd.ranks[(size_t)i];
      r->local = i;
      r->forward_out = !cmd.quiet || r->rank == 0;
      r->beat.rank = r->rank;
      r->running = true;
      r->beat.pid = r->pid;
      r->beat.state = "running";
      attempt_->ranks.push_back(std::move(r));
    }
    beat_.attempt = cmd.attempt;
    beat_.state = "running";
    next_beat_ = Clock::now();
  }

  // A rank's output: stdout lines to the driver as messages, stderr lines through err_ (both
  // dropped when the driver does not read), every line matched against the patterns.
  void init_streams(LocalRank& r) {
    LocalRank* raw = &r;
    r.out.keep = false;
    r.out.on_line = [this, raw](std::string_view l) {
      match(raw->rank, l);
      if (raw->forward_out) chan_->push_line(encode_message({{"type", "line"}, {"rank", raw->rank}, {"text", l}}));
    };
    r.err.keep = false;
    r.err.out_fd = 2;
    r.err.on_line = [this, raw](std::string_view l) {
      match(raw->rank, l);
      err_->push_line(raw->rank >= 0 ? fmt::format("[rank {}] {}", raw->rank, l) : fmt::format("[standby] {}", l));
    };
  }

  // A rank's OMP_NUM_THREADS unless the run sets it: this executor's, else cores / local ranks.
  static std::string default_omp_threads(int local_ranks) {
    const char* omp = std::getenv("OMP_NUM_THREADS");
    return omp ? omp : std::to_string(omp_threads_per_rank(local_ranks));
  }

  // ---- standbys (standby.h) ------------------------------------------------------------------

  void set_standby(const StandbyCommand& cmd) {
    if (cmd.argv != standby_cmd_.argv) discard_standbys(0);
    standby_cmd_ = cmd;
    discard_standbys((size_t)std::max(0, cmd.count));
  }

  // Keeps at most `keep` standbys: the rest get the end of their stdin (they exit 0) and SIGKILL.
  void discard_standbys(size_t keep) {
    while (standby_.size() > keep) {
      Standby& w = standby_.back();
      if (w.stdin_w >= 0) ::close(w.stdin_w), w.stdin_w = -1;
      ::kill(-w.proc->pid, SIGKILL);
      int st = 0;
      while (::waitpid(w.proc->pid, &st, 0) < 0 && errno == EINTR) {}
      release_standby(w);
      standby_.pop_back();
    }
  }

  // An ended (reaped) standby's leftovers: its group, its stdin and its output pipes.
  void release_standby(Standby& w) {
    ::kill(-w.proc->pid, SIGKILL);
    janitor_.forget_group(w.proc->pid);
    if (w.stdin_w >= 0) ::close(w.stdin_w), w.stdin_w = -1;
    for (RankStream* s : {&w.proc->out, &w.proc->err})
      if (s->fd >= 0) ::close(s->fd), s->fd = -1;
  }

  // Starts standbys up to the count, when nothing else needs the cores: no self-check running,
  // and no attempt, or an attempt whose ranks all completed a step (so that a restart's start-up
  // is not slowed by them). A standby that ends unasked turns them off for this executor.
  void replenish_standbys() {
    if (standby_cmd_.count <= 0 || standby_off_ || check_) return;
    if (attempt_) {
      if (attempt_->stopping || attempt_->running() < (int)attempt_->ranks.size()) return;
      for (const auto& r : attempt_->ranks)
        if (r->beat.step <= 0) return;
    }
    while ((int)standby_.size() < standby_cmd_.count) {
      int p[2];
      MS_SYSCHECK(::pipe2(p, O_CLOEXEC) == 0, "pipe2");
      Standby w;
      w.proc = std::make_unique<LocalRank>();
      init_streams(*w.proc);
      std::vector<std::string> env = current_environment();
      set_env(env, kStandbyEnv, "1");
      // What start() gives a rank of an attempt with `count` local ranks, unless the run sets it.
      w.omp = default_omp_threads(standby_cmd_.count);
      set_env(env, "OMP_NUM_THREADS", w.omp);
      try {
        w.proc->pid = spawn_with_streams(standby_cmd_.argv, env, SpawnOptions{p[0], -1, -1, true, true},
                                         w.proc->out, w.proc->err);
      } catch (const std::exception& e) {
        ::close(p[0]), ::close(p[1]);
        std::fprintf(stderr, "megascale executor %d: standbys off: %s\n", opt_.host, e.what());
        standby_off_ = true;
        return;
      }
      ::close(p[0]);
      w.stdin_w = p[1];
      janitor_.watch_group(w.proc->pid);
      w.proc->running = true;
      w.proc->beat.warm = true;
      standby_.push_back(std::move(w));
    }
  }

  void reap_standbys() {
    for (size_t i = 0; i < standby_.size();) {
      Standby& w = standby_[i];
      int st = 0;
      if (::waitpid(w.proc->pid, &st, WNOHANG) != w.proc->pid) {
        i++;
        continue;
      }
      for (RankStream* s : {&w.proc->out, &w.proc->err})
        if (s->fd >= 0) pump(*s, -1);  // its last words (closes at the end of the pipe)
      std::fprintf(stderr, "megascale executor %d: %s before it was needed; standbys off, ranks start cold\n",
                   opt_.host, describe_status("a standby process", st).c_str());
      release_standby(w);
      standby_.erase(standby_.begin() + (std::ptrdiff_t)i);
      standby_off_ = true;
    }
  }

  // A waiting standby of argv, handed its rank's environment; nullptr when there is none.
  std::unique_ptr<LocalRank> take_standby(const std::vector<std::string>& argv,
                                          const std::map<std::string, std::string>& env) {
    reap_standbys();  // one that ended since the loop last looked is not handed a rank
    if (standby_.empty() || argv != standby_cmd_.argv) return nullptr;
    if (env.at("OMP_NUM_THREADS") != standby_.front().omp) return nullptr;  // start() always names it
    Standby w = std::move(standby_.front());
    standby_.erase(standby_.begin());
    const std::string line = encode_standby_assignment(env);
    write_all(w.stdin_w, line.data(), line.size());
    ::close(w.stdin_w);
    return std::move(w.proc);
  }

  // Moves the previous attempt's files of this host's ranks out of records/ and hang/.
  void archive_previous(int attempt) {
    if (out_dir_.empty() || attempt == 0) return;
    const fs::path out(out_dir_), to = out / "attempts" / std::to_string(attempt - 1);
    for (int r : prev_ranks_) {
      for (const auto& [from_dir, name] : {std::pair<std::string, std::string>{"records", fmt::format("rank-{:05d}.jsonl", r)},
                                           {"hang", fmt::format("rank-{:05d}.json", r)}}) {
        const fs::path from = out / from_dir / name;
        std::error_code ec;
        if (!fs::exists(from, ec)) continue;
        fs::create_directories(to / from_dir, ec);
        fs::rename(from, to / from_dir / name, ec);
        if (ec) std::fprintf(stderr, "megascale executor %d: cannot move %s aside: %s\n", opt_.host, from.c_str(), ec.message().c_str());
      }
    }
  }

  void finish_attempt() {
    signal_attempt(SIGKILL);  // leftover grandchildren of ranks that exited
    prev_ranks_.clear();
    for (auto& r : attempt_->ranks) {
      prev_ranks_.push_back(r->rank);
      if (r->pid > 0 && !r->running) janitor_.forget_group(r->pid);
      for (RankStream* s : {&r->out, &r->err})
        if (s->fd >= 0) ::close(s->fd), s->fd = -1;
    }
    attempt_.reset();
  }

  void signal_attempt(int sig) {
    if (!attempt_) return;
    for (auto& r : attempt_->ranks)
      if (r->pid > 0) {
        if (sig != SIGKILL) ::kill(-r->pid, SIGCONT);
        ::kill(-r->pid, sig);
      }
  }

  void stop(int sig, std::chrono::milliseconds grace) {
    if (check_) kill_checks();
    if (!attempt_) return;
    if (attempt_->running() == 0) {
      signal_attempt(SIGKILL);
      return;
    }
    if (!attempt_->stopping || sig == SIGKILL) {
      signal_attempt(sig);
      attempt_->stopping = true;
      attempt_->kill_at = Clock::now() + grace;
      attempt_->killed = sig == SIGKILL;
      beat_.state = "stopping";
    }
  }

  // Reaps ended ranks; true when one ended (a beat goes out at once).
  bool reap() {
    if (!attempt_) return false;
    bool ended = false;
    for (auto& r : attempt_->ranks) {
      if (!r->running) continue;
      int st = 0;
      const pid_t w = ::waitpid(r->pid, &st, WNOHANG);
      if (w <= 0) continue;
      r->running = false;
      r->status = st;
      r->beat.state = WIFSIGNALED(st) ? "killed" : "exited";
      r->beat.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      r->beat.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      ended = true;
    }
    if (ended && attempt_->running() == 0) {
      for (auto& r : attempt_->ranks)  // the last output of the ranks
        for (RankStream* s : {&r->out, &r->err})
          if (s->fd >= 0) pump(*s, r->rank);
      signal_attempt(SIGKILL);  // nothing of the attempt outlives it
      beat_.state = "stopped";
    }
    return ended;
  }

  void match(int rank, std::string_view line) {
    const std::string s(line.substr(0, 2000));
    const char* level = nullptr;
    if (s.find("fault injected (MEGASCALE_") != std::string::npos) level = "fault";  // obs/fault_injection.h, ckpt/ckpt_fault.h
    else {
      for (const auto& re : errors_)
        if (std::regex_search(s, re)) { level = "error"; break; }
      if (!level)
        for (const auto& re : warnings_)
          if (std::regex_search(s, re)) { level = "warning"; break; }
    }
    if (level && beat_.lines.size() < 200) beat_.lines.push_back({rank, level, s});
  }

  // ---- heartbeats ----------------------------------------------------------------------------

  void read_records() {
    if (!attempt_) return;
    if (!attempt_->tail) {
      const fs::path run_json = dir_ / fmt::format("attempt-{}", attempt_->cmd.attempt) / "run.json";
      std::ifstream f(run_json);
      if (!f) return;
      const json j = json::parse(f, nullptr, false);
      if (j.is_discarded() || !j.contains("out_dir")) return;
      out_dir_ = j["out_dir"].get<std::string>();
      beat_.out_dir = out_dir_;
      attempt_->tail = std::make_unique<RecordTail>(out_dir_);
    }
    RunRecords fresh;
    try {
      fresh = attempt_->tail->poll();
    } catch (const std::exception& e) {
      beat_.error = e.what();
      return;
    }
    for (const RankRecords& rr : fresh.ranks) {
      LocalRank* r = nullptr;
      for (auto& x : attempt_->ranks)
        if (x->rank == rr.rank) r = x.get();
      if (!r) continue;  // another host's rank in a shared folder
      // An earlier process's file (a lost host's rank, never moved aside): not this rank's progress.
      if (rr.has_header && rr.header.pid != 0 && rr.header.pid != r->pid) continue;
      for (const CommRecord& c : rr.comms) {
        if (c.status != "ok" && c.status != "done") continue;
        if (c.op != "recv") beat_.bytes_sent += c.bytes;
        if (c.op != "send") beat_.bytes_recv += c.bytes;
      }
      for (const RecordedStep& s : rr.steps) {
        RankBeat& b = r->beat;
        b.step = std::max(b.step, s.step);
        b.step_ms = (double)(s.t1 - s.t0) / 1e6;
        b.tokens_per_s = s.tokens_per_s;
        b.ms = s.ms;
        if (s.loss) b.loss = *s.loss;
        beat_.steps.push_back({r->rank, s.step, s.loss ? *s.loss : NAN, b.step_ms});
      }
    }
  }

  void beat() {
    read_records();
    // The last beat is still queued (the driver does not read now): this one waits, and its news
    // (steps, lines, bytes) go with the next beat that is sent; the oldest steps beyond 10000 go.
    if (chan_->kept_pending()) {
      if (beat_.steps.size() > 10000) beat_.steps.erase(beat_.steps.begin(), beat_.steps.end() - 10000);
      return;
    }
    beat_.seq++;
    beat_.ranks.clear();
    if (attempt_)
      for (auto& r : attempt_->ranks) beat_.ranks.push_back(r->beat);
    beat_.standby.clear();
    for (const Standby& w : standby_) beat_.standby.push_back(w.proc->pid);
    if (check_) beat_.state = "selfcheck";
    send(beat_);
    beat_.steps.clear();
    beat_.lines.clear();
    beat_.bytes_sent = beat_.bytes_recv = 0;
    beat_.error.clear();
  }

  // ---- self-checks ---------------------------------------------------------------------------

  void start_checks(const SelfCheckCommand& cmd) {
    MS_CHECK(!attempt_ || attempt_->running() == 0, "a self-check while ranks run");
    if (check_) kill_checks();
    check_ = std::make_unique<SelfCheckRun>();
    check_->cmd = cmd;
    check_->deadline = Clock::now() + std::chrono::milliseconds(cmd.timeout_ms);
    const std::vector<std::string> base = current_environment();
    for (size_t i = 0; i < cmd.procs.size(); i++) {
      const SelfCheckProc& p = cmd.procs[i];
      const std::string file = (dir_ / fmt::format("selfcheck-{}-{}.json", cmd.id, i)).string();
      std::vector<std::string> env = base;
      for (const auto& [k, v] : p.env) set_env(env, k, v);
      set_env(env, "MEGASCALE_HOST", opt_.address);
      set_env(env, "MEGASCALE_HOST_INDEX", std::to_string(opt_.host));
      std::vector<std::string> argv = p.argv;
      argv.push_back("--out");
      argv.push_back(file);
      pid_t pid = -1;
      try {
        pid = spawn(argv, env, SpawnOptions{devnull_, devnull_w_, 2, true, true});  // stdout (its JSON, also in the file) must not reach the control channel
        janitor_.watch_group(pid);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "megascale executor %d: %s\n", opt_.host, e.what());
      }
      check_->pids.push_back(pid);
      check_->status.push_back(pid > 0 ? 0 : (1 << 8));
      check_->done.push_back(pid <= 0);
      check_->files.push_back(file);
    }
  }

  void poll_checks() {
    if (!check_) return;
    bool all = true;
    for (size_t i = 0; i < check_->pids.size(); i++) {
      if (check_->done[i]) continue;
      int st = 0;
      if (::waitpid(check_->pids[i], &st, WNOHANG) == check_->pids[i]) {
        check_->done[i] = true;
        check_->status[i] = st;
        ::kill(-check_->pids[i], SIGKILL);
        janitor_.forget_group(check_->pids[i]);
      } else {
        all = false;
      }
    }
    if (!all && Clock::now() >= check_->deadline) {
      kill_checks();
      all = true;
    }
    if (!all) return;
    SelfCheckReport rep;
    rep.host = opt_.host;
    rep.id = check_->cmd.id;
    for (size_t i = 0; i < check_->pids.size(); i++) {
      SelfCheckResult res;
      res.exit_code = status_code(check_->status[i]);
      std::ifstream f(check_->files[i]);
      if (f) {
        json j = json::parse(f, nullptr, false);
        if (!j.is_discarded()) res.result = j;
      }
      std::error_code ec;
      fs::remove(check_->files[i], ec);
      rep.results.push_back(res);
    }
    check_.reset();
    send(rep);
    beat_.state = attempt_ ? "stopped" : "idle";
  }

  void kill_checks() {
    if (!check_) return;
    for (size_t i = 0; i < check_->pids.size(); i++) {
      if (check_->done[i] || check_->pids[i] <= 0) continue;
      ::kill(-check_->pids[i], SIGKILL);
      int st = 0;
      while (::waitpid(check_->pids[i], &st, 0) < 0 && errno == EINTR) {}
      check_->done[i] = true;
      check_->status[i] = st;
      janitor_.forget_group(check_->pids[i]);
    }
  }

  void kill_everything() noexcept {
    try {
      kill_checks();
      check_.reset();
      discard_standbys(0);
      if (attempt_) {
        signal_attempt(SIGKILL);
        for (auto& r : attempt_->ranks)
          if (r->running) {
            int st;
            while (::waitpid(r->pid, &st, 0) < 0 && errno == EINTR) {}
            r->running = false;
          }
        finish_attempt();
      }
    } catch (...) {
    }
  }

  ExecutorOptions opt_;
  Janitor janitor_;  // kills the ranks' groups and removes dir_ if this process dies without cleaning up
  std::vector<std::regex> errors_, warnings_;
  SignalPipe signals_;
  fs::path dir_;
  fs::path mem_dir_;  // the host's memory folder (in-memory checkpoints)
  int devnull_ = -1, devnull_w_ = -1;
  HostBeat beat_;
  std::unique_ptr<OutputQueue> chan_, err_;  // stdout (the control channel) and stderr
  Clock::time_point next_beat_{};
  std::unique_ptr<Attempt> attempt_;
  std::unique_ptr<SelfCheckRun> check_;
  std::vector<Standby> standby_;  // warm processes waiting for a rank (standby.h)
  StandbyCommand standby_cmd_;
  bool standby_off_ = false;      // one ended unasked: ranks start cold from then on
  std::string out_dir_;
  std::vector<int> prev_ranks_;
};

}  // namespace

int run_executor(const ExecutorOptions& opt) {
  // Die with the driver (its local child) even when blocked; the end of stdin is the usual sign.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 1;
  Executor ex(opt);
  return ex.run();
}

}  // namespace ms::launch
