// host_launcher: how the driver starts an executor on a host (launch-internal). The driver never
// knows how a host is reached: a HostLauncher turns the executor's argv into the argv that runs it
// there. Two kinds:
//  - local: the host is this machine ("localhost", "127.0.0.1" or "local"); the argv runs as is.
//    Several local entries make several "hosts" on one machine.
//  - a command prefix with {host}: e.g. "ssh -o BatchMode=yes {host}", "srun -N1 -n1 -w {host}" or
//    "ip netns exec {host}"; the words are split on spaces and {host} replaced by the entry.
// Whatever runs the executor must forward its stdin and stdout (the control channel) and end it
// when that channel closes; ssh and srun do.
// parse_hosts reads `--hosts`: comma-separated entries, "NAME*K" for K copies.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace ms::launch {

struct HostSpec {
  int index = 0;
  std::string name;
  bool local = true;        // runs on this machine (local launcher)
  std::string address;      // what its ranks bind to: 127.0.0.1 for local hosts, else the name
};

class HostLauncher {
 public:
  virtual ~HostLauncher() = default;
  virtual std::vector<std::string> wrap(const HostSpec& host, const std::vector<std::string>& argv) const = 0;
};

// "local" (or empty): only local hosts; otherwise a prefix template (see above) for the others.
std::unique_ptr<HostLauncher> make_host_launcher(const std::string& spec);

// "localhost*3,node7" -> 4 hosts; an empty entry or K < 1 is an ms::Error naming --hosts.
std::vector<HostSpec> parse_hosts(const std::string& text);

}  // namespace ms::launch
