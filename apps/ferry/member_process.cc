#include "member_process.h"

namespace ferry::apps {

Result<std::unique_ptr<nicd::Device>> attach_nicd(const std::string& socket, const std::string& client_name) {
  nicd::OpenOptions o;
  o.socket_path = socket;
  o.client_name = client_name;
  auto d = nicd::Device::open(o);
  if (!d.ok()) {
    return Status(d.status().code(), "cannot attach to the NIC daemon at " + socket + " (is `ferry nicd --socket " +
                                         socket + "` running?): " + d.status().message());
  }
  return d;
}

void block_stop_signals(sigset_t* stop) {
  sigemptyset(stop);
  sigaddset(stop, SIGINT);
  sigaddset(stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, stop, nullptr);
}

}  // namespace ferry::apps
