// host_launcher: see host_launcher.h.
#include "launch/host_launcher.h"

#include <cctype>
#include <charconv>
#include <sstream>
#include <string_view>

#include "base/check.h"

namespace ms::launch {

namespace {

bool is_local(const std::string& name) { return name == "localhost" || name == "127.0.0.1" || name == "local"; }

// Launchers that exec the command's words directly (no shell re-parses them): srun, ip netns exec,
// nsenter. Every other launcher (ssh, rsh, a wrapper script) is taken to join its arguments with
// spaces for a shell, the way ssh does, and gets each argument quoted.
bool execs_directly(const std::string& program) {
  const std::string base = program.substr(program.rfind('/') + 1);
  return base == "srun" || base == "ip" || base == "nsenter";
}

class PrefixLauncher : public HostLauncher {
 public:
  explicit PrefixLauncher(std::string spec) {
    std::istringstream in(spec);
    std::string w;
    while (in >> w) words_.push_back(w);
    MS_CHECK(!words_.empty(), "--host-launcher: empty command");
    quote_ = !execs_directly(words_.front());
  }
  std::vector<std::string> wrap(const HostSpec& host, const std::vector<std::string>& argv) const override {
    if (host.local) return argv;
    std::vector<std::string> out;
    for (std::string w : words_) {
      for (size_t at; (at = w.find("{host}")) != std::string::npos;) w.replace(at, 6, host.name);
      out.push_back(w);
    }
    for (const std::string& a : argv) out.push_back(quote_ ? shell_quote(a) : a);
    return out;
  }

 private:
  std::vector<std::string> words_;
  bool quote_ = true;  // the launcher hands the command to a shell (ssh): quote every argument
};

class LocalLauncher : public HostLauncher {
 public:
  std::vector<std::string> wrap(const HostSpec& host, const std::vector<std::string>& argv) const override {
    MS_CHECK(host.local, "host '{}' is not this machine: give --host-launcher a command that reaches it, e.g. "
             "\"ssh -o BatchMode=yes {{host}}\"", host.name);
    return argv;
  }
};

}  // namespace

std::string shell_quote(const std::string& word) {
  static constexpr std::string_view kPlain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%";
  if (!word.empty() && word.find_first_not_of(kPlain) == std::string::npos) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool is_host_name(const std::string& name) {
  static constexpr std::string_view kChars =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:";
  return !name.empty() && name.size() <= 253 && std::isalnum((unsigned char)name.front()) &&
         name.find_first_not_of(kChars) == std::string::npos;
}

std::unique_ptr<HostLauncher> make_host_launcher(const std::string& spec) {
  if (spec.empty() || spec == "local") return std::make_unique<LocalLauncher>();
  MS_CHECK(spec.find("{host}") != std::string::npos, "--host-launcher '{}' must contain {{host}} (or be 'local')", spec);
  return std::make_unique<PrefixLauncher>(spec);
}

std::vector<HostSpec> parse_hosts(const std::string& text) {
  std::vector<HostSpec> hosts;
  std::istringstream in(text);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    MS_CHECK(!entry.empty(), "--hosts '{}': an empty entry", text);
    int copies = 1;
    if (const size_t star = entry.find('*'); star != std::string::npos) {
      const std::string k = entry.substr(star + 1);
      const auto r = std::from_chars(k.data(), k.data() + k.size(), copies);
      MS_CHECK(r.ec == std::errc() && r.ptr == k.data() + k.size() && copies >= 1 && copies <= 1024,
               "--hosts entry '{}': the count after * must be 1..1024", entry);
      entry = entry.substr(0, star);
      MS_CHECK(!entry.empty(), "--hosts '{}': an empty host name", text);
    }
    // NAME=ADDRESS: reach the host by NAME, bind its ranks to ADDRESS ("auto": found on the host).
    std::string address;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) address = entry.substr(eq + 1);
    const std::string name = entry.substr(0, eq);
    MS_CHECK(is_host_name(name), "--hosts entry '{}' is not a host name: letters, digits, '.', '-', '_' and ':' "
             "only, starting with a letter or digit", name);
    MS_CHECK(eq == std::string::npos || address == "auto" || is_host_name(address),
             "--hosts entry '{}': the address after '=' is not a host name or address (or 'auto')", entry);
    entry = name;
    for (int i = 0; i < copies; i++) {
      HostSpec h;
      h.index = (int)hosts.size();
      h.name = entry;
      h.local = is_local(entry);
      h.address = !address.empty() ? address : h.local ? "127.0.0.1" : entry;
      hosts.push_back(h);
    }
  }
  MS_CHECK(!hosts.empty(), "--hosts: no host given");
  return hosts;
}

}  // namespace ms::launch
