#include "redis_peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ferry::bench {

namespace {

namespace fs = std::filesystem;

// Below Linux's ephemeral range (32768-60999 by default), so that no
// outgoing connection of another program takes one meanwhile.
constexpr int kRedisPortLow = 20000;
constexpr int kRedisPortSpan = 12000;

bool loopback_port_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return free;
}

// Three consecutive free ports, starting from one derived from the pid (two
// benches at once pick different ones).
std::vector<int> pick_redis_ports() {
  int base = kRedisPortLow + static_cast<int>(static_cast<unsigned>(getpid()) * 7u % kRedisPortSpan);
  for (int attempt = 0; attempt < 64; ++attempt) {
    base = kRedisPortLow + (base - kRedisPortLow + 3) % (kRedisPortSpan - 3);
    if (loopback_port_free(base) && loopback_port_free(base + 1) && loopback_port_free(base + 2)) {
      return {base, base + 1, base + 2};
    }
  }
  return {};
}

// Pins every thread of `pid` to `cpu`.
void pin_process_threads(pid_t pid, int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    (void)sched_setaffinity(static_cast<pid_t>(std::atoi(e->d_name)), sizeof set, &set);
  }
  closedir(d);
}

// utime + stime of a process (all its threads), ns.
uint64_t process_cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  // After the comm: state(3) ppid pgrp session tty_nr tpgid flags minflt
  // cminflt majflt cmajflt utime(14) stime(15).
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return (utime + stime) * (1'000'000'000ULL / static_cast<uint64_t>(ticks > 0 ? ticks : 100));
}

redisContext* connect_redis(int port, int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c != nullptr && c->err != 0) {
    redisFree(c);
    return nullptr;
  }
  return c;
}

// A string reply's text ("" for anything else), and frees the reply.
std::string reply_text(void* r) {
  auto* reply = static_cast<redisReply*>(r);
  std::string text;
  if (reply != nullptr && (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS)) {
    text.assign(reply->str, reply->len);
  }
  if (reply != nullptr) freeReplyObject(reply);
  return text;
}

std::string info_field(const std::string& info, const std::string& key) {
  const auto at = info.find(key + ":");
  if (at == std::string::npos) return {};
  const auto end = info.find_first_of("\r\n", at);
  return info.substr(at + key.size() + 1, end == std::string::npos ? std::string::npos : end - at - key.size() - 1);
}

std::string output_tail(const ChildProcess& server) {
  const std::string& all = server.output();
  if (all.empty()) return "(none)";
  return all.size() > 1500 ? all.substr(all.size() - 1500) : all;
}

}  // namespace

bool RedisPeer::installed(const std::string& server) {
  if (server.find('/') != std::string::npos) return access(server.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', pos), dirs.size());
    const std::string candidate = dirs.substr(pos, end - pos) + "/" + server;
    if (access(candidate.c_str(), X_OK) == 0) return true;
    pos = end + 1;
  }
  return false;
}

Result<std::unique_ptr<RedisPeer>> RedisPeer::start(const RedisPeerOptions& o, std::ostream& log) {
  if (!installed(o.server)) {
    return not_found("redis: " + o.server + " is not installed (scripts/install-deps.sh installs redis-server)");
  }
  std::unique_ptr<RedisPeer> peer(new RedisPeer());
  std::string tmpl = (fs::temp_directory_path() / "ferry-redis-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return internal_error("redis: mkdtemp " + tmpl + " failed");
  peer->dir_ = tmpl;
  peer->ports_ = pick_redis_ports();
  if (peer->ports_.empty()) return unavailable("redis: no three free loopback ports found");
  // The servers write no file there (no persistence, diskless sync and
  // load, the log on the pipe), so the fatal-signal handler can rmdir it.
  set_cleanup_dir(peer->dir_);
  const char* roles[] = {"primary", "replica1", "replica2"};
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> args = {
        "--port", std::to_string(peer->ports_[i]), "--bind", "127.0.0.1", "--daemonize", "no",
        // No persistence: WAIT acknowledges the replicas' memory only.
        "--save", "", "--appendonly", "no",
        // Warnings only: nobody reads the pipe until a server fails.
        "--dir", peer->dir_, "--logfile", "", "--loglevel", "warning",
        // A replica's first sync starts at once (the default waits 5 s for
        // more replicas) and loads from the socket, not from a file.
        "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-diskless-load", "on-empty-db",
        "--io-threads", "1"};
    if (i > 0) {
      args.push_back("--replicaof");
      args.push_back("127.0.0.1");
      args.push_back(std::to_string(peer->ports_[0]));
    }
    FERRY_ASSIGN_OR_RETURN(auto child, ChildProcess::spawn_program(std::string("redis ") + roles[i], o.server, args));
    peer->servers_.push_back(std::move(child));
  }
  // Each answers PING.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < 3; ++i) {
    for (;;) {
      if (!peer->servers_[i]->running()) {
        (void)peer->servers_[i]->stop(100);  // reads what it said
        return unavailable(fmt::format("redis {}: exited at start ({}); its output: {}", roles[i],
                                       peer->servers_[i]->exit_text(), output_tail(*peer->servers_[i])));
      }
      if (redisContext* c = connect_redis(peer->ports_[i], 200)) {
        const std::string pong = reply_text(redisCommand(c, "PING"));
        if (i == 0 && pong == "PONG") {
          const std::string info = reply_text(redisCommand(c, "INFO server"));
          peer->version_ = info_field(info, "redis_version");
        }
        redisFree(c);
        if (pong == "PONG") break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        (void)peer->servers_[i]->stop(1000);
        return unavailable(fmt::format("redis {}: no answer to PING within 20 s; its output: {}", roles[i],
                                       output_tail(*peer->servers_[i])));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  pin_process_threads(peer->servers_[0]->pid(), o.primary_cpu);
  pin_process_threads(peer->servers_[1]->pid(), o.replica_cpu);
  pin_process_threads(peer->servers_[2]->pid(), o.replica_cpu);
  // Both replicas online, seen from both sides.
  for (;;) {
    bool up = true;
    if (redisContext* c = connect_redis(peer->ports_[0], 500)) {
      up = info_field(reply_text(redisCommand(c, "INFO replication")), "connected_slaves") == "2";
      redisFree(c);
    } else {
      up = false;
    }
    for (int i = 1; i < 3 && up; ++i) {
      if (redisContext* c = connect_redis(peer->ports_[i], 500)) {
        up = info_field(reply_text(redisCommand(c, "INFO replication")), "master_link_status") == "up";
        redisFree(c);
      } else {
        up = false;
      }
    }
    if (up) break;
    if (std::chrono::steady_clock::now() > deadline) {
      (void)peer->servers_[1]->stop(1000);
      return unavailable("redis: the replicas did not come online within 20 s; replica1's output: " +
                         output_tail(*peer->servers_[1]));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  peer->primary_ = connect_redis(peer->ports_[0], 10'000);
  if (peer->primary_ == nullptr) return unavailable("redis: cannot connect to the primary");
  peer->description_ = fmt::format(
      "redis-server {}: primary 127.0.0.1:{} (CPU {}), replicas :{} :{} (CPU {}); appendonly no, save off "
      "(WAIT 2 0 acknowledges the replicas' memory, not a disk); working directory {}",
      peer->version_, peer->ports_[0], o.primary_cpu, peer->ports_[1], peer->ports_[2], o.replica_cpu, peer->dir_);
  log << "  " << peer->description_ << "\n";
  return peer;
}

RedisPeer::~RedisPeer() {
  if (primary_ != nullptr) redisFree(primary_);
  for (auto& s : servers_) (void)s->stop(3000);  // SIGTERM; an error exit is not ours to report here
  servers_.clear();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    set_cleanup_dir("");
  }
}

Status RedisPeer::command_status(void* r, std::string_view what) {
  auto* reply = static_cast<redisReply*>(r);
  if (reply == nullptr) {
    return unavailable(fmt::format("redis {}: {}", what, primary_->errstr));
  }
  Status s;
  if (reply->type == REDIS_REPLY_ERROR) {
    s = unavailable(fmt::format("redis {}: {}", what, std::string(reply->str, reply->len)));
  }
  freeReplyObject(reply);
  return s;
}

Status RedisPeer::wait_both_replicas() {
  auto* reply = static_cast<redisReply*>(redisCommand(primary_, "WAIT 2 0"));
  if (reply == nullptr) return unavailable(fmt::format("redis WAIT: {}", primary_->errstr));
  const bool both = reply->type == REDIS_REPLY_INTEGER && reply->integer >= 2;
  const long long acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
  freeReplyObject(reply);
  if (!both) return unavailable(fmt::format("redis WAIT 2 0 returned {} replicas", acked));
  return ok_status();
}

Status RedisPeer::set_replicated(std::string_view key, std::span<const uint8_t> value) {
  FERRY_RETURN_IF_ERROR(command_status(
      redisCommand(primary_, "SET %b %b", key.data(), key.size(), value.data(), value.size()), "SET"));
  return wait_both_replicas();
}

Status RedisPeer::insert_replicated(std::string_view key, std::span<const uint8_t> value) {
  redisAppendCommand(primary_, "MULTI");
  redisAppendCommand(primary_, "SET %b %b", key.data(), key.size(), value.data(), value.size());
  redisAppendCommand(primary_, "ZADD %b 0 %b", kIndexKey.data(), kIndexKey.size(), key.data(), key.size());
  redisAppendCommand(primary_, "EXEC");
  // MULTI's OK and the two QUEUED: an error here (a bad command) aborts EXEC.
  for (const char* what : {"MULTI", "SET (queued)", "ZADD (queued)"}) {
    void* r = nullptr;
    if (redisGetReply(primary_, &r) != REDIS_OK) {
      return unavailable(fmt::format("redis {}: {}", what, primary_->errstr));
    }
    FERRY_RETURN_IF_ERROR(command_status(r, what));
  }
  void* r = nullptr;
  if (redisGetReply(primary_, &r) != REDIS_OK) return unavailable(fmt::format("redis EXEC: {}", primary_->errstr));
  auto* exec = static_cast<redisReply*>(r);
  // EXEC answers one reply per queued command, or nil if it was aborted.
  bool applied = exec->type == REDIS_REPLY_ARRAY && exec->elements == 2;
  for (size_t i = 0; applied && i < exec->elements; ++i) applied = exec->element[i]->type != REDIS_REPLY_ERROR;
  freeReplyObject(exec);
  if (!applied) return unavailable(fmt::format("redis EXEC of SET + ZADD {}: aborted or failed", key));
  return wait_both_replicas();
}

Status RedisPeer::load(const std::vector<std::string>& keys, const std::vector<std::vector<uint8_t>>& values) {
  constexpr size_t kBatch = 512;
  std::vector<const char*> zadd_argv;
  std::vector<size_t> zadd_lengths;
  for (size_t begin = 0; begin < keys.size(); begin += kBatch) {
    const size_t end = std::min(keys.size(), begin + kBatch);
    zadd_argv.assign({"ZADD", kIndexKey.data()});
    zadd_lengths.assign({4, kIndexKey.size()});
    for (size_t i = begin; i < end; ++i) {
      const auto& v = values[i % values.size()];
      redisAppendCommand(primary_, "SET %b %b", keys[i].data(), keys[i].size(), v.data(), v.size());
      zadd_argv.push_back("0");
      zadd_lengths.push_back(1);
      zadd_argv.push_back(keys[i].data());
      zadd_lengths.push_back(keys[i].size());
    }
    // The batch's keys into the index, one ZADD.
    redisAppendCommandArgv(primary_, static_cast<int>(zadd_argv.size()), zadd_argv.data(), zadd_lengths.data());
    for (size_t i = begin; i <= end; ++i) {
      void* r = nullptr;
      if (redisGetReply(primary_, &r) != REDIS_OK) return unavailable(fmt::format("redis load: {}", primary_->errstr));
      FERRY_RETURN_IF_ERROR(command_status(r, i < end ? "SET (load)" : "ZADD (load)"));
    }
  }
  auto* reply = static_cast<redisReply*>(redisCommand(primary_, "WAIT 2 0"));
  if (reply == nullptr) return unavailable(fmt::format("redis WAIT: {}", primary_->errstr));
  freeReplyObject(reply);
  return ok_status();
}

Result<std::optional<std::string>> RedisPeer::get(std::string_view key) {
  auto* reply = static_cast<redisReply*>(redisCommand(primary_, "GET %b", key.data(), key.size()));
  if (reply == nullptr) return unavailable(fmt::format("redis GET: {}", primary_->errstr));
  std::optional<std::string> value;
  Status s;
  if (reply->type == REDIS_REPLY_STRING) {
    value.emplace(reply->str, reply->len);
  } else if (reply->type == REDIS_REPLY_ERROR) {
    s = unavailable(fmt::format("redis GET: {}", std::string(reply->str, reply->len)));
  }
  freeReplyObject(reply);
  if (!s.ok()) return s;
  return value;
}

Result<std::vector<RedisRecord>> RedisPeer::scan(std::string_view start_key, uint32_t count) {
  const std::string limit = std::to_string(count);
  auto* range = static_cast<redisReply*>(redisCommand(primary_, "ZRANGEBYLEX %b [%b + LIMIT 0 %s",
                                                      kIndexKey.data(), kIndexKey.size(), start_key.data(),
                                                      start_key.size(), limit.c_str()));
  if (range == nullptr) return unavailable(fmt::format("redis ZRANGEBYLEX: {}", primary_->errstr));
  std::vector<RedisRecord> records;
  Status s;
  if (range->type != REDIS_REPLY_ARRAY) {
    s = unavailable(fmt::format("redis ZRANGEBYLEX: {}", range->type == REDIS_REPLY_ERROR
                                                             ? std::string(range->str, range->len)
                                                             : std::string("not an array")));
  } else {
    records.resize(range->elements);
    for (size_t i = 0; i < range->elements; ++i) {
      records[i].key.assign(range->element[i]->str, range->element[i]->len);
    }
  }
  freeReplyObject(range);
  if (!s.ok()) return s;
  if (records.empty()) return records;
  std::vector<const char*> argv = {"MGET"};
  std::vector<size_t> lengths = {4};
  for (const auto& rec : records) {
    argv.push_back(rec.key.data());
    lengths.push_back(rec.key.size());
  }
  auto* values = static_cast<redisReply*>(
      redisCommandArgv(primary_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (values == nullptr) return unavailable(fmt::format("redis MGET: {}", primary_->errstr));
  if (values->type != REDIS_REPLY_ARRAY || values->elements != records.size()) {
    s = unavailable(fmt::format("redis MGET of {} keys: {}", records.size(),
                                values->type == REDIS_REPLY_ERROR ? std::string(values->str, values->len)
                                                                  : fmt::format("{} replies", values->elements)));
  } else {
    for (size_t i = 0; i < values->elements; ++i) {
      const redisReply* v = values->element[i];
      if (v->type == REDIS_REPLY_STRING) records[i].value.emplace(v->str, v->len);
    }
  }
  freeReplyObject(values);
  if (!s.ok()) return s;
  return records;
}

uint64_t RedisPeer::replica_cpu_ns() const {
  uint64_t total = 0;
  for (size_t i = 1; i < servers_.size(); ++i) total += process_cpu_ns(servers_[i]->pid());
  return total;
}

}  // namespace ferry::bench
