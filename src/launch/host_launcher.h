// host_launcher: how the driver starts an executor on a host (launch-internal). The driver never
// knows how a host is reached: a HostLauncher turns the executor's argv into the argv that runs it
// there. Two kinds:
//  - local: the host is this machine ("localhost", "127.0.0.1" or "local"); the argv runs as is.
//    Several local entries make several "hosts" on one machine.
//  - a command prefix with {host}: e.g. "ssh -o BatchMode=yes {host}", "srun -N1 -n1 -w {host}" or
//    "ip netns exec {host}"; the words are split on spaces and {host} replaced by the entry.
//    The executor's argv follows the prefix. ssh (and any launcher not known to exec its words
//    directly) joins its arguments with spaces for the remote shell, so each one is quoted for a
//    POSIX shell (shell_quote): an argument with spaces, quotes, ';', '|' or '$' reaches the
//    executor unchanged. srun, ip (netns exec) and nsenter exec the words themselves and get them
//    unquoted.
// Whatever runs the executor must forward its stdin and stdout (the control channel) and end it
// when that channel closes; ssh and srun do.
// parse_hosts reads `--hosts`: comma-separated entries, "NAME*K" for K copies, "NAME=ADDRESS" for a
// host reached by NAME whose ranks bind ADDRESS (e.g. Slurm node names, which need not resolve:
// "h1=10.0.0.1"; "NAME=auto": each rank finds its host's address on its interface, MEGASCALE_HOST=auto). A name must be a
// host name (is_host_name): one starting with '-' would become a launcher's option
// (ssh -oProxyCommand=...), one with a space or a quote would change the launcher's command.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace ms::launch {

struct HostSpec {
  int index = 0;
  std::string name;
  bool local = true;        // runs on this machine (local launcher)
  std::string address;      // what its ranks bind to: NAME=ADDRESS's, else 127.0.0.1 for local hosts, else the name
};

class HostLauncher {
 public:
  virtual ~HostLauncher() = default;
  virtual std::vector<std::string> wrap(const HostSpec& host, const std::vector<std::string>& argv) const = 0;
};

// "local" (or empty): only local hosts; otherwise a prefix template (see above) for the others.
std::unique_ptr<HostLauncher> make_host_launcher(const std::string& spec);

// "localhost*3,node7" -> 4 hosts; an empty entry, K < 1 or a name that is not a host name is an
// ms::Error naming --hosts.
std::vector<HostSpec> parse_hosts(const std::string& text);

// word as one word for a POSIX shell: unchanged when it has only letters, digits and _-+=.,/:@%,
// else in single quotes (a ' inside written '\'').
std::string shell_quote(const std::string& word);
// 1..253 characters of letters, digits, '.', '-', '_' and ':' (IPv6), starting with a letter or a
// digit: a DNS name, an IPv4 or IPv6 address, a network namespace's or a Slurm node's name.
bool is_host_name(const std::string& name);

}  // namespace ms::launch
