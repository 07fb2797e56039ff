// A LogKv client machine: routes each request by the coordinator's tablet
// map to the owning server and, there, to the worker owning the key's
// partition; refreshes the map and retries when the server says the tablet
// is not its own or the call fails.
#include <chrono>
#include <functional>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "ferry/store/logkv_deploy.h"
#include "logkv_internal.h"

namespace ferry::store::logkv {

struct Client::Impl {
  ClientOptions options;
  Runtime* rt = &Runtime::threads();  // the cluster's (in process), else threads
  nic::Nic* nic = nullptr;
  uint32_t client_workers = 0;                     // per server: route by hash % client_workers
  std::vector<std::unique_ptr<rpc::Client>> rpcs;  // per server (nullptr: unreachable)
  // Where table maps come from: the in-process cluster, or a deployment's
  // coordinator (by id, or by name with create).
  std::function<Result<TableMap>(uint32_t session, uint64_t table_id)> fetch_map;
  std::function<Result<TableMap>(uint32_t session, std::string_view name, bool create)> named_table;
  std::unique_ptr<rpc::Client> coordinator;  // deployed
  mutable SharedMutex map_mu;
  std::map<uint64_t, TableMap> maps;
  std::atomic<uint64_t> refreshes{0};
  // Per session: its next call re-reads the map (a write's outcome was
  // unknown, and it was not sent again).
  std::vector<char> refresh_next;

  Result<uint32_t> owner(uint32_t session, uint64_t table_id, uint64_t hash, bool refresh) {
    if (!refresh) {
      std::shared_lock lk(map_mu);
      auto it = maps.find(table_id);
      if (it != maps.end()) return it->second.owner_of(hash);
    }
    FERRY_ASSIGN_OR_RETURN(auto map, fetch_map(session, table_id));
    ++refreshes;
    std::unique_lock lk(map_mu);
    auto& m = maps[table_id] = std::move(map);
    return m.owner_of(hash);
  }

  // One request, routed and retried. The reply's status byte and payload.
  // A write (not `idempotent`) whose call failed after it was sent is sent
  // again only with options.retry_unknown_writes.
  Result<rpc::CallReply> call(uint32_t session, uint16_t type, uint64_t table_id, std::span<const uint8_t> key,
                              std::span<const uint8_t> payload, bool idempotent) {
    if (session >= options.sessions) return invalid_argument("logkv client: no session " + std::to_string(session));
    const uint64_t hash = key_hash(table_id, key);
    Status last = unavailable("logkv: no attempt made");
    bool refresh = refresh_next[session] != 0;
    refresh_next[session] = 0;
    const Clock& clock = rt->clock();
    const uint64_t start = clock.now_ns();
    const uint64_t retry_until = start + uint64_t{options.retry_for_ms} * 1'000'000;
    uint32_t attempt = 0;
    for (; attempt < options.max_attempts || clock.now_ns() < retry_until; ++attempt) {
      if (attempt > 0) rt->sleep_for_ns(uint64_t{std::min<uint32_t>(attempt * attempt, 50)} * 1'000'000);
      if (rt->cancelled()) return unavailable("logkv: the client crashed (cancelled) before the call ended");
      FERRY_ASSIGN_OR_RETURN(const uint32_t server, owner(session, table_id, hash, refresh));
      refresh = true;
      if (server >= rpcs.size()) return internal_error("logkv: tablet owner out of range");
      if (rpcs[server] == nullptr) {
        last = unavailable("logkv: server " + std::to_string(server) + " was down when this client started");
        continue;
      }
      auto reply = rpcs[server]->session(session).call(type, hash % client_workers, payload, /*nilext=*/false);
      if (!reply.ok()) {
        last = reply.status();
        if (!idempotent && !options.retry_unknown_writes) {
          refresh_next[session] = 1;
          return unavailable("logkv: the outcome of the write is unknown (server " + std::to_string(server) +
                             ": " + last.message() + ")");
        }
        continue;
      }
      if (reply->app_status == kWrongServer) {
        last = unavailable("logkv: server " + std::to_string(server) + " no longer serves the tablet");
        continue;
      }
      return reply;
    }
    const uint64_t ms = (clock.now_ns() - start) / 1'000'000;
    return Status(last.code(), "logkv: gave up after " + std::to_string(attempt) + " attempts in " +
                                   std::to_string(ms) + " ms: " + last.message());
  }
};

namespace {

uint64_t read_u64(const std::vector<uint8_t>& b) {
  uint64_t v = 0;
  if (b.size() >= 8) std::memcpy(&v, b.data(), 8);
  return v;
}

Status status_of(uint8_t app, const std::vector<uint8_t>& payload) {
  switch (app) {
    case kOk: return ok_status();
    case kNotFound: return not_found("logkv: no such key");
    case kVersionMismatch:
      return failed_precondition("logkv: version mismatch (current " + std::to_string(read_u64(payload)) + ")");
    case kMalformed: return invalid_argument("logkv: the server found the request malformed");
    case kTooLarge: return invalid_argument("logkv: the object is too large");
    case kUnavailable: return unavailable("logkv: replication failed; the write was not acknowledged");
    default: return internal_error("logkv: unknown reply status " + std::to_string(app));
  }
}

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::create(Cluster& cluster, const ClientOptions& options) {
  if (options.sessions == 0) return invalid_argument("logkv client: at least one session");
  if (options.max_attempts == 0) return invalid_argument("logkv client: max_attempts at least 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->refresh_next.assign(options.sessions, 0);
  impl->rt = cluster.impl().runtime;
  impl->client_workers = cluster.options().server.workers;
  impl->fetch_map = [&cluster](uint32_t, uint64_t table_id) { return cluster.table(table_id); };
  impl->named_table = [&cluster](uint32_t, std::string_view name, bool create) -> Result<TableMap> {
    if (!create) return cluster.table(name);
    FERRY_ASSIGN_OR_RETURN(uint64_t id, cluster.create_table(name));
    return cluster.table(id);
  };
  const uint32_t number = cluster.impl().clients_made++;
  FERRY_ASSIGN_OR_RETURN(impl->nic, cluster.engine().add_nic({.name = "logkv-client-" + std::to_string(number)}));
  rpc::ClientOptions co;
  co.sessions = options.sessions;
  co.timeout_ns = options.timeout_ns;
  for (uint32_t i = 0; i < cluster.servers(); ++i) {
    if (!cluster.alive(i)) {
      impl->rpcs.push_back(nullptr);
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(auto c, rpc::Client::create(cluster.engine(), *impl->nic, cluster.server(i).rpc(), co));
    impl->rpcs.push_back(std::move(c));
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<std::unique_ptr<Client>> Client::connect(nic::Nic& nic, const Deployment& d, const ClientOptions& options) {
  if (options.sessions == 0) return invalid_argument("logkv client: at least one session");
  if (options.max_attempts == 0) return invalid_argument("logkv client: max_attempts at least 1");
  FERRY_RETURN_IF_ERROR(check_deployment(d));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->refresh_next.assign(options.sessions, 0);
  impl->nic = &nic;
  impl->client_workers = d.server.workers;
  rpc::ClientOptions co;
  co.sessions = options.sessions;
  co.timeout_ns = options.timeout_ns;
  const rpc::ServerInfo coord_info = detail::coordinator_rpc_info();
  auto coord = rpc::Client::connect(nic, d.coordinator.listen, detail::kCoordinatorService, co, &coord_info);
  if (!coord.ok()) {
    return Status(coord.status().code(), "logkv client: the coordinator (" + d.coordinator.listen +
                                             "): " + coord.status().message());
  }
  impl->coordinator = std::move(coord).value();
  rpc::Client* c = impl->coordinator.get();
  impl->fetch_map = [c](uint32_t session, uint64_t table_id) -> Result<TableMap> {
    detail::WireWriter w;
    w.put<uint8_t>(0);
    w.put<uint64_t>(table_id);
    FERRY_ASSIGN_OR_RETURN(auto reply, detail::control_call(*c, session, detail::kCoordTable,
                                                            detail::kCoordTableWorker, w.out()));
    return detail::parse_table_map(reply.payload);
  };
  impl->named_table = [c](uint32_t session, std::string_view name, bool create) -> Result<TableMap> {
    detail::WireWriter w;
    if (!create) w.put<uint8_t>(1);
    w.bytes({reinterpret_cast<const uint8_t*>(name.data()), name.size()});
    FERRY_ASSIGN_OR_RETURN(auto reply, detail::control_call(*c, session, create ? detail::kCoordCreateTable
                                                                                : detail::kCoordTable,
                                                            detail::kCoordTableWorker, w.out()));
    return detail::parse_table_map(reply.payload);
  };
  const rpc::ServerInfo info = detail::rpc_info(d.server);
  for (const auto& member : d.servers) {
    auto rc = rpc::Client::connect(nic, member.listen, detail::kServerService, co, &info);
    impl->rpcs.push_back(rc.ok() ? std::move(rc).value() : nullptr);
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Result<uint64_t> Client::put(uint32_t session, uint64_t table_id, std::span<const uint8_t> key,
                             std::span<const uint8_t> value, std::optional<uint64_t> expected_version) {
  if (key.size() > tailwind::kMaxKeyBytes) return invalid_argument("logkv: key longer than 65535 bytes");
  const auto payload = detail::encode_request(table_id, key, value, expected_version);
  FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(session, kLogKvPut, table_id, key, payload, /*idempotent=*/false));
  FERRY_RETURN_IF_ERROR(status_of(reply.app_status, reply.payload));
  return read_u64(reply.payload);
}

Result<GetResult> Client::get(uint32_t session, uint64_t table_id, std::span<const uint8_t> key) {
  if (key.size() > tailwind::kMaxKeyBytes) return invalid_argument("logkv: key longer than 65535 bytes");
  const auto payload = detail::encode_request(table_id, key, {}, std::nullopt);
  FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(session, kLogKvGet, table_id, key, payload, /*idempotent=*/true));
  FERRY_RETURN_IF_ERROR(status_of(reply.app_status, reply.payload));
  if (reply.payload.size() < 8) return internal_error("logkv: a GET reply without its version");
  GetResult out;
  out.version = read_u64(reply.payload);
  out.value.assign(reply.payload.begin() + 8, reply.payload.end());
  return out;
}

Status Client::remove(uint32_t session, uint64_t table_id, std::span<const uint8_t> key,
                      std::optional<uint64_t> expected_version) {
  if (key.size() > tailwind::kMaxKeyBytes) return invalid_argument("logkv: key longer than 65535 bytes");
  const auto payload = detail::encode_request(table_id, key, {}, expected_version);
  FERRY_ASSIGN_OR_RETURN(auto reply, impl_->call(session, kLogKvRemove, table_id, key, payload, /*idempotent=*/false));
  return status_of(reply.app_status, reply.payload);
}

Result<TableMap> Client::table(uint32_t session, std::string_view name) {
  if (session >= impl_->options.sessions) return invalid_argument("logkv client: no session " + std::to_string(session));
  return impl_->named_table(session, name, false);
}

Result<TableMap> Client::create_table(uint32_t session, std::string_view name) {
  if (session >= impl_->options.sessions) return invalid_argument("logkv client: no session " + std::to_string(session));
  return impl_->named_table(session, name, true);
}

uint64_t Client::map_refreshes() const { return impl_->refreshes; }

}  // namespace ferry::store::logkv
