// What every deployed member process (`ferry hyperloop ...`, `ferry logkv
// ...`) does the same way: attach to its host's NIC daemon, and take the
// stop signals in one place.
#pragma once

#include <signal.h>

#include <memory>
#include <string>

#include "ferry/common/status.h"
#include "ferry/nicd/nicd.h"

namespace ferry::apps {

// Attaches to the daemon at `socket`; the error says which daemon to start.
Result<std::unique_ptr<nicd::Device>> attach_nicd(const std::string& socket, const std::string& client_name);

// Blocks SIGINT and SIGTERM in this thread (call before any thread starts,
// so every thread inherits the mask) and returns them as `*stop` for sigwait.
void block_stop_signals(sigset_t* stop);

}  // namespace ferry::apps
