// The membership store on an etcd v3 server (store.h), through etcd's JSON
// gateway (grpc-gateway) over HTTP/1.1 with libcurl. Written against etcd
// 3.4 (Debian bookworm's etcd-server), whose gateway serves /v3/...:
//   /v3/kv/put, /v3/kv/range, /v3/kv/deleterange, /v3/kv/txn,
//   /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke, /v3/watch.
//
// Errors: unavailable when the server cannot be reached, answers with an
// HTTP error, or sends a body that does not decode (the message says which);
// timed_out when a request exceeds its timeout; errors etcd reports map to
// their codes (not_found for an unknown lease, ...). Nothing the network
// sends can crash the process.
//
// Watches: each watch is one streaming POST /v3/watch on its own thread,
// which runs the callback. If the stream breaks (etcd restarted, a proxy
// closed it) the thread reconnects with backoff from the revision after the
// last one delivered, so no event is lost or repeated; only a compacted start
// revision or a server-side cancel ends a watch (a non-ok WatchUpdate).
//
// Threads: thread-safe. Requests reuse a small pool of connections.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/membership/store.h"

namespace ferry::membership {

struct EtcdOptions {
  std::string endpoint;  // "http://HOST:PORT" (no trailing slash)
  uint32_t request_timeout_ms = 5'000;
  uint32_t connect_timeout_ms = 2'000;
  // Between reconnection attempts of a broken watch stream (doubling).
  uint32_t watch_retry_min_ms = 50;
  uint32_t watch_retry_max_ms = 2'000;
};

class EtcdStore final : public MembershipStore {
 public:
  // Does not contact the server (open_store() does). invalid_argument for an
  // endpoint that is not http://HOST:PORT.
  static Result<std::unique_ptr<EtcdStore>> create(EtcdOptions options);
  // Watches must have been cancelled (destroyed) first.
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  Result<Revision> put(const std::string& key, const std::string& value, LeaseId lease = 0) override;
  Result<RangeResult> get(const KeySpan& span) override;
  Result<DeleteResult> erase(const KeySpan& span) override;
  Result<TxnResult> compare_and_swap(const std::string& compare_key, Revision expected_mod_revision,
                                     const Mutation& effect) override;
  Result<Lease> grant_lease(int64_t ttl_seconds) override;
  Result<int64_t> keep_alive(LeaseId lease) override;
  Status revoke_lease(LeaseId lease) override;
  Result<std::unique_ptr<Watch>> watch(const KeySpan& span, Revision start_revision, WatchCallback callback) override;

  // GET /health: ok when the server answers {"health":"true"}.
  Status health();

  const EtcdOptions& options() const { return options_; }

 private:
  explicit EtcdStore(EtcdOptions options);
  // POST `body` to `path`; the 200 body, or the Status of the failure.
  Result<std::string> post(const char* path, const std::string& body);
  Result<std::string> request(const char* path, const std::string* body);  // GET when body == nullptr
  void* take_handle();
  void return_handle(void* handle);

  const EtcdOptions options_;
  std::mutex handles_mu_;
  std::vector<void*> idle_handles_;  // CURL*, each keeping its connection open; guarded by handles_mu_
};

}  // namespace ferry::membership
