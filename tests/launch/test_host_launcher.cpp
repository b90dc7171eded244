// test_host_launcher: how the driver reaches a host. `--hosts` names that are not host names are
// refused (a name starting with '-' would be an ssh option); the command line built for a launcher
// that hands its words to a shell (ssh) quotes every argument, one that execs them (srun) does not;
// arguments with ';', '|', spaces, quotes and '$' reach the program unchanged through a launcher
// that re-parses them with a real shell, and through a real ssh to a private sshd on loopback
// (started by the test, in the foreground, with its own host key and a temporary authorized key);
// spawn() finds a bare program name ("ssh") in PATH; and a driven job runs its executor over ssh.
#include <arpa/inet.h>   // htonl
#include <fcntl.h>       // open
#include <netinet/in.h>  // sockaddr_in
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/check.h"
#include "common/test_util.h"
#include "launch/host_launcher.h"
#include "launch/process.h"
#include "launch/redis_server.h"

namespace {

namespace fs = std::filesystem;
using ms::launch::HostSpec;
using ms::launch::make_host_launcher;
using ms::launch::parse_hosts;

const std::string kBin = MEGASCALE_BINARY;

HostSpec remote(const std::string& name) {
  HostSpec h;
  h.name = name;
  h.local = false;
  h.address = name;
  return h;
}

// The arguments that a shell would split, expand or run if they reached it unquoted.
std::vector<std::string> nasty_args(const std::string& marker) {
  return {"oom|touch " + marker, "a;touch " + marker, "with space", "it's", "\"double\"", "$HOME", "`id`",
          "$(touch " + marker + ")", "", "*", "~", "back\\slash", "tab\there", "new\nline", "-oProxyCommand=x"};
}

// Runs argv (spawn, stdout into out_file) and returns its exit status.
int run_to_file(const std::vector<std::string>& argv, const std::string& out_file) {
  const int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << out_file;
  ms::launch::SpawnOptions so;
  so.stdout_fd = fd;
  const pid_t pid = ms::launch::spawn(argv, ms::launch::current_environment(), so);
  ::close(fd);
  return ms::launch::wait_for(pid, "test command");
}

// printf's output for the arguments: each one between brackets on a line of its own.
std::string bracketed(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += "[" + a + "]\n";
  return s;
}

class HostLauncher : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_host_launcher"; }
};

}  // namespace

TEST(HostNames, NamesThatAreNotHostNamesAreRefused) {
  for (const std::string bad : {"-oProxyCommand=touch /tmp/x", "-p", "a b", "a;b", "node1|x", "user@node", "n'1",
                                "$(id)", ".hidden", "node/1", "*2"}) {
    try {
      parse_hosts(bad);
      ADD_FAILURE() << "accepted --hosts '" << bad << "'";
    } catch (const ms::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--hosts"), std::string::npos) << what;
      EXPECT_TRUE(what.find("not a host name") != std::string::npos || what.find("empty") != std::string::npos) << what;
    }
  }
  const auto hosts = parse_hosts("node7,10.0.0.1,fe80::1,n-1.example.com,gpu_03,localhost*2");
  ASSERT_EQ(hosts.size(), 7u);
  EXPECT_EQ(hosts[2].name, "fe80::1");
  EXPECT_FALSE(hosts[0].local);
  EXPECT_TRUE(hosts[5].local && hosts[6].local);
  EXPECT_EQ(hosts[1].address, "10.0.0.1");
  // NAME=ADDRESS: reached by NAME, ranks bound to ADDRESS (or found on the host: auto).
  const auto named = parse_hosts("h1=10.77.0.1,h2=auto,localhost=127.0.0.2");
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].name, "h1");
  EXPECT_EQ(named[0].address, "10.77.0.1");
  EXPECT_EQ(named[1].address, "auto");
  EXPECT_TRUE(named[2].local);
  EXPECT_EQ(named[2].address, "127.0.0.2");
  for (const std::string bad : {"h1=-oProxyCommand=x", "h1=", "=10.0.0.1", "h1=a b"}) {
    EXPECT_THROW(parse_hosts(bad), ms::Error) << bad;
  }
}

TEST(ShellQuote, PlainWordsStayAndOthersAreSingleQuoted) {
  using ms::launch::shell_quote;
  EXPECT_EQ(shell_quote("/opt/megascale/build/megascale"), "/opt/megascale/build/megascale");
  EXPECT_EQ(shell_quote("--beat-ms"), "--beat-ms");
  EXPECT_EQ(shell_quote("oom|touch X"), "'oom|touch X'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
}

TEST(HostLauncherArgv, SshGetsEveryArgumentQuotedAndSrunGetsThemAsIs) {
  const std::vector<std::string> argv = {"/bin/megascale", "executor", "--run-dir", "/tmp/my runs",
                                         "--error-pattern", "oom|touch X"};
  const auto ssh = make_host_launcher("ssh -o BatchMode=yes {host}")->wrap(remote("node7"), argv);
  EXPECT_EQ(ssh, (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "node7", "/bin/megascale", "executor",
                                           "--run-dir", "'/tmp/my runs'", "--error-pattern", "'oom|touch X'"}));
  const auto srun = make_host_launcher("/usr/bin/srun -N1 -n1 -w {host}")->wrap(remote("node7"), argv);
  std::vector<std::string> want = {"/usr/bin/srun", "-N1", "-n1", "-w", "node7"};
  want.insert(want.end(), argv.begin(), argv.end());
  EXPECT_EQ(srun, want);
  // A local host runs the argv as is, whatever the launcher.
  HostSpec local = remote("localhost");
  local.local = true;
  EXPECT_EQ(make_host_launcher("ssh {host}")->wrap(local, argv), argv);
}

TEST_F(HostLauncher, ArgumentsReachTheProgramUnchangedThroughAShell) {
  // A stand-in for ssh: it drops the host and hands the rest, joined with spaces, to sh -c.
  const std::string fake = path("fake-ssh");
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\nshift\nexec /bin/sh -c \"$*\"\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  const std::string marker = path("touched");
  std::vector<std::string> argv = {"/usr/bin/printf", "[%s]\\n"};
  const auto args = nasty_args(marker);
  argv.insert(argv.end(), args.begin(), args.end());
  const auto wrapped = make_host_launcher(fake + " {host}")->wrap(remote("node7"), argv);
  EXPECT_EQ(run_to_file(wrapped, path("out.txt")), 0);
  EXPECT_EQ(ms::testing::slurp(path("out.txt")), bracketed(args));
  EXPECT_FALSE(fs::exists(marker)) << "an argument ran as a command";
}

TEST(Spawn, ABareProgramNameIsFoundInPath) {
  std::vector<std::string> env = {"PATH=/nonexistent:/bin:/usr/bin"};
  const pid_t pid = ms::launch::spawn({"sh", "-c", "exit 7"}, env);
  const int st = ms::launch::wait_for(pid, "sh");
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 7);
  EXPECT_EQ(ms::launch::find_program("sh", {"PATH=/bin"}), "/bin/sh");
  try {
    ms::launch::spawn({"megascale-no-such-program"}, env);
    ADD_FAILURE() << "started a program that does not exist";
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start megascale-no-such-program: no such program in PATH"),
              std::string::npos) << e.what();
  }
}

namespace {

// Single-quotes s for sh (the test's own command lines).
std::string q(const std::string& s) { return ms::launch::shell_quote(s); }

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(s, (sockaddr*)&a, sizeof a) == 0 && ::getsockname(s, (sockaddr*)&a, &len) == 0) port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

// A private sshd on 127.0.0.1 (foreground, its own config, host key and authorized key; password
// logins off), stopped and reaped by TearDown. launcher() is a --host-launcher that reaches it
// under any host name (HostName=127.0.0.1), with the bare program name "ssh" (found in PATH).
class SshLauncher : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_ssh"; }
  void SetUp() override {
    TempDirTest::SetUp();
    if (!fs::exists("/usr/sbin/sshd") || !fs::exists("/usr/bin/ssh") || !fs::exists("/usr/bin/ssh-keygen")) {
      MS_SKIP_OR_FAIL_IN_CI("openssh-server / openssh-client are missing (scripts/setup.sh installs them)");
    }
    // sshd refuses to start without its privilege separation folder (the Debian service makes it).
    if (!fs::exists("/run/sshd")) {
      if (::geteuid() != 0) GTEST_SKIP() << "/run/sshd is missing and only root can make it";
      fs::create_directories("/run/sshd");
      fs::permissions("/run/sshd", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                       fs::perms::others_read | fs::perms::others_exec);
    }
    const auto keys = ms::testing::run_cmd("ssh-keygen -q -t ed25519 -N '' -f " + q(path("host_key")) +
                                           " && ssh-keygen -q -t ed25519 -N '' -f " + q(path("client_key")) +
                                           " && cp " + q(path("client_key.pub")) + " " + q(path("authorized_keys")));
    ASSERT_EQ(keys.code, 0) << keys.output;
    {
      std::ofstream conf(path("sshd_config"));
      conf << "ListenAddress 127.0.0.1\nHostKey " << path("host_key") << "\nAuthorizedKeysFile "
           << path("authorized_keys") << "\nPidFile none\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
           << "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n";
    }
    port_ = free_port();
    ASSERT_GT(port_, 0);
    const int log = ::open(path("sshd.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ms::launch::SpawnOptions so;
    so.stderr_fd = log;
    so.new_group = true;
    so.die_with_parent = true;
    sshd_ = ms::launch::spawn({"/usr/sbin/sshd", "-D", "-e", "-f", path("sshd_config"), "-p", std::to_string(port_)},
                              ms::launch::current_environment(), so);
    ::close(log);
    const std::string probe = launcher_words() + " probe true </dev/null";
    ASSERT_TRUE(ms::testing::eventually([&] { return ms::testing::run_cmd(probe).code == 0; }, 20))
        << "sshd did not answer: " << ms::testing::slurp(path("sshd.log"));
  }
  void TearDown() override {
    if (sshd_ > 0) {
      ::kill(-sshd_, SIGTERM);
      ms::launch::wait_for(sshd_, "sshd");
    }
    TempDirTest::TearDown();
  }
  std::string launcher_words() const {
    return "ssh -p " + std::to_string(port_) + " -i " + path("client_key") +
           " -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
           " -o HostName=127.0.0.1";
  }
  std::string launcher() const { return launcher_words() + " {host}"; }

  int port_ = -1;
  pid_t sshd_ = -1;
};

}  // namespace

TEST_F(SshLauncher, ArgumentsArriveUnchangedOverRealSsh) {
  const std::string marker = path("touched");
  std::vector<std::string> argv = {"/usr/bin/printf", "[%s]\\n"};
  const auto args = nasty_args(marker);
  argv.insert(argv.end(), args.begin(), args.end());
  const auto wrapped = make_host_launcher(launcher())->wrap(remote("node7"), argv);
  ASSERT_EQ(wrapped.front(), "ssh");  // found in PATH by spawn
  EXPECT_EQ(run_to_file(wrapped, path("out.txt")), 0) << ms::testing::slurp(path("sshd.log"));
  EXPECT_EQ(ms::testing::slurp(path("out.txt")), bracketed(args));
  EXPECT_FALSE(fs::exists(marker)) << "an argument ran as a command on the host";
}

TEST_F(SshLauncher, DrivenJobRunsItsExecutorOverSsh) {
  // The README's example: one remote "host" (127.0.0.2, a loopback address, reached through the
  // sshd above), a run dir with a space and an error pattern with '|' and a command in it.
  const std::string marker = path("touched");
  fs::create_directories(path("run dir"));
  fs::create_directories(path("redis"));
  fs::permissions(path("redis"), fs::perms::owner_all);
  ms::launch::RedisServer redis(path("redis"));  // a store the "remote" host can reach
  const std::string cmd = "MEGASCALE_STORE_PASSWORD=" + redis.password() + " timeout 120 " + kBin +
                          " launch --hosts 127.0.0.2 --nproc-per-host 1 --store " + redis.url() +
                          " --dashboard-port -1 --heartbeat 0.2 --log-dir " + q(path("logs")) + " --run-dir " +
                          q(path("run dir")) + " --host-launcher " + q(launcher()) + " --error-pattern " +
                          q("oom|touch " + marker) + " -- /bin/sh -c " + q("echo hello from rank $RANK") +
                          " </dev/null";
  const auto r = ms::testing::run_cmd(cmd);
  EXPECT_EQ(r.code, 0) << r.output << ms::testing::slurp(path("sshd.log"));
  EXPECT_NE(r.output.find("[rank 0] hello from rank 0"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(marker)) << "the error pattern ran as a command on the host";
}
