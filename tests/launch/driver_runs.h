// driver_runs: what the driver fault tests share (reliability.md Part C, sized for CI): a learnable
// token stream and a small 2-layer config with a checkpoint every 4 steps and a fixed global batch,
// driven jobs (`megascale launch --hosts ...`) as real processes with fast heartbeats, and the
// checks made after every fault: per-step losses against an uninterrupted run (bit-identical),
// the event log (detection latency, recovery time, restarts), and the clean slate (no process of
// the job left — found by a marker variable every process of the job inherits — no folder left in
// the job's run dir, no new shared-memory segment).
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/processes.h"
#include "common/test_util.h"
#include "data/token_shard.h"

namespace ms::testing {

// Processes (other than zombies) whose environment holds NAME=value.
inline std::vector<int> processes_with_env(const std::string& entry) {
  std::vector<int> pids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit((unsigned char)name[0])) continue;
    std::ifstream f(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t at = 0;
    bool found = false;
    while (at < env.size()) {
      const size_t end = env.find('\0', at);
      if (env.compare(at, (end == std::string::npos ? env.size() : end) - at, entry) == 0) found = true;
      if (end == std::string::npos) break;
      at = end + 1;
    }
    if (!found) continue;
    std::ifstream st(e.path() / "stat");
    std::string stat;
    std::getline(st, stat);
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    pids.push_back(std::stoi(name));
  }
  return pids;
}

inline std::set<std::string> shm_segments() {
  std::set<std::string> s;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("megascale", 0) == 0) s.insert(e.path().filename().string());
  return s;
}

struct DriverRun {
  int code = -1;
  std::string output;
  std::vector<nlohmann::json> events;
  nlohmann::json summary;
  std::map<int, double> losses;                  // step -> the loss of its last execution
  std::map<int, std::vector<double>> all_losses;  // step -> every execution's loss
  double seconds = 0;

  std::vector<nlohmann::json> of(const std::string& name) const {
    std::vector<nlohmann::json> v;
    for (const auto& e : events)
      if (e.value("event", "") == name) v.push_back(e);
    return v;
  }
};

class DriverJob {
 public:
  static constexpr int kSteps = 16, kEvery = 4;

  explicit DriverJob(const std::string& tag) : dir_(make_temp_dir(tag)) {
    TestRng rng(11);
    std::vector<int> perm(512);
    for (int i = 0; i < 512; i++) perm[i] = i;
    for (int i = 511; i > 0; i--) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    std::vector<uint16_t> t(60000);
    int tok = 0;
    for (size_t i = 0; i < t.size(); i++) {
      if (i % 89 == 0) tok = static_cast<int>(rng.next() % 512);
      t[i] = static_cast<uint16_t>(tok);
      tok = perm[tok];
    }
    write_token_shard(dir_ + "/train.bin", t);
    std::ofstream(dir_ + "/cfg.toml")
        << "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab_size = 512\nmax_seq_len = 32\n"
           "[optim]\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\n"
           "[train]\nsteps = " << kSteps << "\nbatch_size = 2\nseq_len = 32\nglobal_batch = 24\neval_every = 0\n"
           "sample_tokens = 0\nthreads = 1\nprogress = \"lines\"\n"
           // memory_every = 0: these jobs recover from storage (the in-memory path: test_memory_recovery).
           "[checkpoint]\nevery = " << kEvery << "\nmemory_every = 0\n"
           "[obs]\nflush_ms = 200\n"
           "[data]\ntrain = \"" << dir_ << "/train.bin\"\nval = \"\"\n";
  }
  ~DriverJob() { std::filesystem::remove_all(dir_); }
  const std::string& dir() const { return dir_; }

  // The launch command of run `name` (without its environment).
  std::vector<std::string> argv(const std::string& name, const std::string& hosts, int nproc,
                                const std::vector<std::string>& extra_launch = {},
                                const std::vector<std::string>& extra_train = {}) const {
    std::vector<std::string> a = {MEGASCALE_BINARY, "launch", "--hosts", hosts, "--nproc-per-host", std::to_string(nproc),
                                  "--log-dir", dir_ + "/" + name + "-logs", "--run-dir", dir_ + "/" + name + "-tmp"};
    // Fast heartbeats and limits sized for steps of milliseconds; extra_launch may override them.
    const std::vector<std::pair<std::string, std::string>> defaults = {
        {"--dashboard-port", "-1"}, {"--heartbeat", "0.2"}, {"--heartbeat-timeout", "5"}, {"--stall-min", "4"},
        {"--stall-factor", "10"}, {"--startup-timeout", "60"}, {"--traffic-timeout", "0"}, {"--stop-grace", "2"}};
    for (const auto& [k, v] : defaults)
      if (std::find(extra_launch.begin(), extra_launch.end(), k) == extra_launch.end()) a.insert(a.end(), {k, v});
    a.insert(a.end(), extra_launch.begin(), extra_launch.end());
    a.insert(a.end(), {"--", "train", dir_ + "/cfg.toml", "--train.out_dir=" + dir_ + "/" + name});
    a.insert(a.end(), extra_train.begin(), extra_train.end());
    return a;
  }

  // Runs a job to its end (limit: 240 s) with `env` added (MEGASCALE_FAULT, ...).
  DriverRun run(const std::string& name, const std::string& hosts, int nproc, const std::map<std::string, std::string>& env = {},
                const std::vector<std::string>& extra_launch = {}, const std::vector<std::string>& extra_train = {}) {
    Proc p = start(name, hosts, nproc, env, extra_launch, extra_train);
    return finish(name, p, 240);
  }

  Proc start(const std::string& name, const std::string& hosts, int nproc, const std::map<std::string, std::string>& env = {},
             const std::vector<std::string>& extra_launch = {}, const std::vector<std::string>& extra_train = {}) {
    shm_before_ = shm_segments();
    std::map<std::string, std::string> e = env;
    e["MEGASCALE_TEST_MARK"] = mark(name);
    started_ = Clock::now();
    return spawn(argv(name, hosts, nproc, extra_launch, extra_train), e, dir_ + "/" + name + ".out");
  }

  // Starts any command line as run `name` (e.g. a shell pipeline around argv(name, ...)), with the
  // job's marker and `env`; finish(name, ...) reads its results.
  Proc start_command(const std::string& name, const std::vector<std::string>& command,
                     const std::map<std::string, std::string>& env = {}) {
    shm_before_ = shm_segments();
    std::map<std::string, std::string> e = env;
    e["MEGASCALE_TEST_MARK"] = mark(name);
    started_ = Clock::now();
    return spawn(command, e, dir_ + "/" + name + ".out");
  }

  DriverRun finish(const std::string& name, Proc& p, double limit_s) {
    wait_all({&p}, started_, limit_s);
    DriverRun r;
    r.code = p.code;
    r.output = p.output();
    r.seconds = seconds_since(started_);
    r.events = read_events(name);
    for (const auto& e : r.events)
      if (e.value("event", "") == "summary") r.summary = e;
    std::ifstream f(dir_ + "/" + name + "/log.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("loss") && j.contains("step") && j["loss"].is_number()) {
        r.losses[j["step"].get<int>()] = j["loss"].get<double>();
        r.all_losses[j["step"].get<int>()].push_back(j["loss"].get<double>());
      }
    }
    return r;
  }

  std::vector<nlohmann::json> read_events(const std::string& name) const {
    std::vector<nlohmann::json> v;
    std::ifstream f(dir_ + "/" + name + "-logs/events.jsonl");
    std::string line;
    while (std::getline(f, line)) v.push_back(nlohmann::json::parse(line));
    return v;
  }

  std::string mark(const std::string& name) const { return dir_ + "/" + name; }

  // Processes of run `name` whose command line contains `word` (e.g. the executor of a host).
  std::vector<int> processes(const std::string& name, const std::string& word) const {
    std::vector<int> out;
    for (int pid : processes_with_env("MEGASCALE_TEST_MARK=" + mark(name))) {
      std::string cmd = slurp("/proc/" + std::to_string(pid) + "/cmdline");
      for (char& c : cmd)
        if (c == '\0') c = ' ';
      if (cmd.find(word) != std::string::npos) out.push_back(pid);
    }
    return out;
  }

  // Nothing of the job is left: no process with its marker (waits up to 5 s for the kernel to
  // finish reaping), no folder in its run dir, no new shared-memory segment.
  void expect_clean_slate(const std::string& name) const {
    const std::string entry = "MEGASCALE_TEST_MARK=" + mark(name);
    std::vector<int> left;
    for (int i = 0; i < 50; i++) {
      left = processes_with_env(entry);
      if (left.empty()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(left.empty()) << name << ": " << left.size() << " process(es) of the job left, e.g. pid " << left[0];
    for (int pid : left) ::kill(pid, SIGKILL);
    const std::string tmp = dir_ + "/" + name + "-tmp";
    if (std::filesystem::exists(tmp))
      for (const auto& e : std::filesystem::directory_iterator(tmp)) ADD_FAILURE() << name << ": left behind " << e.path();
    // A host's memory folder is megascale-mem-<executor pid>-...: only this job's executors' count
    // (another test running beside this one under `ctest -j` makes its own); without their pids in
    // the events, every new one does.
    std::set<std::string> executors;
    std::ifstream ev(dir_ + "/" + name + "-logs/events.jsonl");
    for (std::string line; std::getline(ev, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("event", "") == "executor_up")
        executors.insert("megascale-mem-" + std::to_string(j.value("pid", 0)) + "-");
    }
    for (const auto& s : shm_segments()) {
      if (s.starts_with("megascale-mem-") && !executors.empty() &&
          std::none_of(executors.begin(), executors.end(), [&](const std::string& p) { return s.starts_with(p); }))
        continue;
      EXPECT_TRUE(shm_before_.count(s)) << name << ": shared-memory segment /dev/shm/" << s << " left behind";
    }
  }

 private:
  std::string dir_;
  std::set<std::string> shm_before_;
  Clock::time_point started_{};
};

// The wall time (Unix seconds) in a fault line "... (attempt 0; unix_ns 1795...)" of the event
// `fault_injected`; NaN if absent.
inline double injected_unix_s(const nlohmann::json& ev) {
  const std::string t = ev.value("text", "");
  const size_t at = t.find("unix_ns ");
  if (at == std::string::npos) return NAN;
  return std::stod(t.substr(at + 8)) / 1e9;
}

}  // namespace ms::testing
