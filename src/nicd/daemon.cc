// The NIC daemon process body: the engine with its UDP-attached NIC, the
// Unix control socket and the thread that serves it.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "ferry/nicd/nicd.h"
#include "server.h"

namespace ferry::nicd {

class Daemon::Impl {
 public:
  ~Impl() { stop(); }

  Status init(const DaemonOptions& options) {
    options_ = options;
    if (options.socket_path.empty() || options.socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return invalid_argument("nicd: socket path empty or longer than " +
                              std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    }
    // The page the engine publishes "asleep" in, mapped by every client.
    page_fd_ = memfd_create("ferry-nicd-device", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (page_fd_ < 0 || ftruncate(page_fd_, 4096) != 0) return unavailable("nicd: device page: " + errno_text());
    (void)fcntl(page_fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd_, 0);
    if (page == MAP_FAILED) return unavailable("nicd: device page: " + errno_text());
    page_ = static_cast<uint8_t*>(page);
    park_flag_ = new (page_) std::atomic<bool>(false);

    nic::EngineOptions eo;
    eo.cpu = options.engine_cpu;
    eo.spin_ns = options.spin_ns;
    eo.spin_policy = options.spin_policy;
    eo.faults = options.faults;
    eo.park_flag = park_flag_;
    engine_ = std::make_unique<nic::Engine>(eo);
    nic::NicOptions no = options.nic;
    no.name = options.name;
    no.memory = nullptr;
    no.udp.enabled = true;
    no.udp.bind = options.bind;
    FERRY_ASSIGN_OR_RETURN(nic_, engine_->add_nic(no));
    server_ = std::make_unique<Server>(engine_.get(), nic_, options.arena_bytes, page_fd_);
    FERRY_RETURN_IF_ERROR(listen_on(options.socket_path));
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) return unavailable("nicd: eventfd: " + errno_text());
    thread_ = std::thread([this] { serve(); });
    return ok_status();
  }

  void stop() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      (void)!write(stop_fd_, &one, sizeof(one));
      thread_.join();
    }
    // Clients see their sockets close: the device is gone for them.
    server_.reset();
    if (listen_fd_ >= 0) {
      close(listen_fd_);
      listen_fd_ = -1;
      unlink(options_.socket_path.c_str());
    }
    engine_.reset();
    if (stop_fd_ >= 0) close(stop_fd_);
    stop_fd_ = -1;
    if (page_ != nullptr) munmap(page_, 4096);
    page_ = nullptr;
    if (page_fd_ >= 0) close(page_fd_);
    page_fd_ = -1;
  }

  nic::Nic& nic() { return *nic_; }
  nic::Engine& engine() { return *engine_; }
  const std::string& socket_path() const { return options_.socket_path; }
  Server& server() { return *server_; }

 private:
  static std::string errno_text() { return std::strerror(errno); }

  Status listen_on(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    // The directory (e.g. /run/ferry) is created if missing.
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) {
      const std::string dir = path.substr(0, slash);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
        return unavailable("nicd: cannot create " + dir + ": " + errno_text());
      }
    }
    // A socket file left by a daemon that died is replaced; one a live
    // daemon answers on is not.
    const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      const bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
      close(probe);
      if (live) return already_exists("nicd: a daemon already serves " + path);
    }
    unlink(path.c_str());
    listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) return unavailable("nicd: socket: " + errno_text());
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return unavailable("nicd: cannot bind " + path + ": " + errno_text());
    }
    // Only the host's users that may use the device (root by default).
    chmod(path.c_str(), 0660);
    if (::listen(listen_fd_, 64) != 0) return unavailable("nicd: listen: " + errno_text());
    return ok_status();
  }

  void serve() {
    std::vector<pollfd> fds;
    std::vector<Client*> owners;
    std::vector<uint8_t> buf(proto::kMaxMessageBytes);
    for (;;) {
      fds.clear();
      owners.clear();
      fds.push_back({stop_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (Client* c : live_) {
        fds.push_back({c->sock, POLLIN, 0});
        owners.push_back(c);
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents & POLLIN) return;
      if (fds[1].revents & POLLIN) accept_clients();
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i + 2].revents == 0) continue;
        Client* c = owners[i];
        int got[8];
        size_t nfds = 0;
        const ssize_t n = proto::recv_message(c->sock, buf.data(), buf.size(), got, 8, &nfds);
        std::vector<int> received(got, got + nfds);
        if (n <= 0 || static_cast<size_t>(n) > buf.size()) {
          for (int fd : received) close(fd);
          drop(c);
          continue;
        }
        Reply reply = server_->handle(c, buf.data(), static_cast<size_t>(n), std::move(received));
        const bool sent = !reply.drop && proto::send_message(c->sock, reply.bytes, reply.fds.data(), reply.fds.size());
        if (!sent) drop(c);
      }
    }
  }

  void accept_clients() {
    for (;;) {
      const int sock = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (sock < 0) return;
      if (live_.size() >= options_.max_clients) {
        close(sock);  // the client sees EOF at HELLO
        continue;
      }
      live_.push_back(server_->add_client(sock));
    }
  }

  void drop(Client* c) {
    live_.erase(std::remove(live_.begin(), live_.end(), c), live_.end());
    server_->release(c);
  }

  DaemonOptions options_;
  int page_fd_ = -1;
  uint8_t* page_ = nullptr;
  std::atomic<bool>* park_flag_ = nullptr;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* nic_ = nullptr;
  std::unique_ptr<Server> server_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
  std::vector<Client*> live_;  // control thread
};

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonOptions& options) {
  auto impl = std::make_unique<Impl>();
  FERRY_RETURN_IF_ERROR(impl->init(options));
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;
nic::Nic& Daemon::nic() { return impl_->nic(); }
nic::Engine& Daemon::engine() { return impl_->engine(); }
const std::string& Daemon::socket_path() const { return impl_->socket_path(); }
size_t Daemon::clients() const { return impl_->server().clients(); }
uint64_t Daemon::clients_released() const { return impl_->server().released(); }
Daemon::Census Daemon::census() const {
  const Server::Census c = impl_->server().census();
  return Census{c.qps, c.cqs, c.srqs, c.mrs, c.segments};
}

}  // namespace ferry::nicd
