// Shell completion scripts for mpsctl, generated from its own CLI11 command table, so that a
// command or option added to client/main.cc completes without editing a script:
// `mpsctl completion bash` / `mpsctl completion zsh` (the build writes both, and installs them
// where bash-completion and zsh look).
//
// Completes: the commands; each command's options and the global ones (--server, --json, ...);
// file names for a positional named FILE and for options whose value is a FILE; nothing for
// other values (a job id, N). Pure functions of the table; no I/O.
#ifndef MPSD_CLIENT_COMPLETION_H_
#define MPSD_CLIENT_COMPLETION_H_

#include <string>

#include <CLI/CLI.hpp>

namespace mpsd::client {

// A bash script that defines _mpsctl and registers it with `complete -F`.
std::string BashCompletion(const CLI::App& app);

// A zsh script for fpath (#compdef mpsctl), written with _arguments and _describe.
std::string ZshCompletion(const CLI::App& app);

}  // namespace mpsd::client

#endif  // MPSD_CLIENT_COMPLETION_H_
