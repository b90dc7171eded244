// app_paths: what the binary knows about where it stands: its own path (to start more of itself),
// and the data files it ships with (GPT-2's BPE tables). The library never guesses a path: every
// loader takes a folder and the launcher takes a full command; the application supplies both.
#pragma once
#include <string>
#include <vector>

namespace ms {

// This executable (/proc/self/exe resolved).
std::string self_executable();

// The hidden subcommand that runs the launcher's janitor (launch/janitor.h), and the command that
// starts it: this very binary through /proc/self/exe (even if its file was replaced meanwhile).
inline constexpr const char* kJanitorCommand = "janitor";
std::vector<std::string> janitor_command();

// The folder with encoder.json and vocab.bpe: $MEGASCALE_TOKENIZER_DIR if set, else
// <dir of this executable>/share/megascale/gpt2 (the build tree), else
// <dir of this executable>/../share/megascale/gpt2 (an installed prefix). An error when none has
// encoder.json.
std::string default_tokenizer_dir();
// dir, or default_tokenizer_dir() when dir is empty.
std::string tokenizer_dir_or_default(const std::string& dir);

// The folder of the launcher's dashboard page (index.html, app.js, style.css, uPlot):
// <dir of this executable>/share/megascale/dashboard, else <dir>/../share/megascale/dashboard;
// empty when neither has index.html (the dashboard then serves a note and its JSON endpoints).
std::string default_dashboard_dir();

// The command of `megascale launch ... -- CMD...`: a CMD containing a '/' runs as given; a bare
// word is a megascale subcommand, run by this very binary.
std::vector<std::string> resolve_launch_command(const std::vector<std::string>& cmd);

}  // namespace ms
