// The membership store: a revisioned key-value store with leases and watches,
// with etcd v3 semantics. Cluster membership and configuration live here
// (docs/membership.md); group views (view.h) are built on it.
//
// Two implementations behind one interface:
//  - InProcessStore (in_process_store.h): single node, in this process, no
//    dependencies. The default when no etcd endpoint is configured.
//  - EtcdStore (etcd_store.h): an etcd v3 server through its JSON gateway.
//
// Semantics (those of etcd v3, so that code tested on the in-process store
// behaves the same on etcd):
//  - Every change (put, delete of at least one key, a successful transaction,
//    a lease's expiry or revocation when it had keys) advances the store's
//    revision by one. A key's mod_revision is the revision of its last put;
//    create_revision that of the put that created it (a key deleted and put
//    again is a new incarnation with a new create_revision).
//  - A lease has a TTL in seconds. Keys put with a lease are deleted, in one
//    revision, when the lease expires (no keep_alive within the TTL) or is
//    revoked. The server may grant a longer TTL than asked (etcd's minimum).
//  - A watch delivers every put and delete of its key range with revision >=
//    its start revision, in revision order, without gaps: a range read at
//    revision R followed by a watch from R+1 misses nothing.
//
// Threads: every method may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"

namespace ferry::membership {

using Revision = int64_t;
using LeaseId = int64_t;  // 0 = no lease

// A single key, or every key that starts with a prefix (the empty prefix
// is every key).
struct KeySpan {
  std::string key;
  bool is_prefix = false;

  static KeySpan exactly(std::string key) { return {std::move(key), false}; }
  static KeySpan prefix(std::string prefix) { return {std::move(prefix), true}; }
  bool contains(std::string_view k) const { return is_prefix ? k.substr(0, key.size()) == key : k == key; }
};

struct KeyValue {
  std::string key;
  std::string value;
  Revision create_revision = 0;
  Revision mod_revision = 0;
  int64_t version = 0;  // puts since creation (1 after the first)
  LeaseId lease = 0;

  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // in key order
  Revision revision = 0;      // the store's revision the read saw
};

struct DeleteResult {
  int64_t deleted = 0;
  Revision revision = 0;  // the store's revision after the delete
};

// The effect of a compare-and-swap: a put (value, lease) or a delete of `key`.
struct Mutation {
  enum class Kind : uint8_t { kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;
  LeaseId lease = 0;

  static Mutation put(std::string key, std::string value, LeaseId lease = 0) {
    return {Kind::kPut, std::move(key), std::move(value), lease};
  }
  static Mutation erase(std::string key) { return {Kind::kDelete, std::move(key), {}, 0}; }
};

struct TxnResult {
  bool succeeded = false;
  Revision revision = 0;  // the store's revision after the transaction
};

struct Lease {
  LeaseId id = 0;
  int64_t ttl_seconds = 0;  // as granted (may exceed what was asked)
};

struct Event {
  enum class Type : uint8_t { kPut, kDelete };
  Type type = Type::kPut;
  // For a delete: key and mod_revision (the revision of the delete) only.
  KeyValue kv;

  Revision revision() const { return kv.mod_revision; }
  friend bool operator==(const Event&, const Event&) = default;
};

// What a watch callback receives: a batch of events in revision order, or
// (status not ok, no events) the end of the watch, e.g. its start revision
// was compacted away. After a non-ok update the callback is not called again.
struct WatchUpdate {
  std::vector<Event> events;
  Status status;
};
using WatchCallback = std::function<void(const WatchUpdate&)>;

// A running watch. cancel() (or destruction) stops delivery: when it returns,
// the callback is not running and will not be called again, except that a
// callback may cancel its own watch (it then returns normally and is not
// called again).
class Watch {
 public:
  virtual ~Watch() = default;
  virtual void cancel() = 0;
};

class MembershipStore {
 public:
  virtual ~MembershipStore() = default;

  // Writes key = value, attached to `lease` (0 = none). Returns the new
  // revision. not_found if the lease does not exist (expired).
  virtual Result<Revision> put(const std::string& key, const std::string& value, LeaseId lease = 0) = 0;

  // Reads the keys of `span` at the current revision.
  virtual Result<RangeResult> get(const KeySpan& span) = 0;

  // Deletes the keys of `span`. Deleting nothing is not an error and does not
  // advance the revision.
  virtual Result<DeleteResult> erase(const KeySpan& span) = 0;

  // Applies `effect` if and only if `compare_key`'s mod_revision equals
  // `expected_mod_revision` (0: the key must be absent). A lost comparison is
  // not an error: succeeded == false.
  virtual Result<TxnResult> compare_and_swap(const std::string& compare_key, Revision expected_mod_revision,
                                             const Mutation& effect) = 0;

  // Leases. keep_alive returns the TTL it renewed for; not_found if the lease
  // has expired or was revoked (its keys are gone).
  virtual Result<Lease> grant_lease(int64_t ttl_seconds) = 0;
  virtual Result<int64_t> keep_alive(LeaseId lease) = 0;
  virtual Status revoke_lease(LeaseId lease) = 0;

  // Watches `span` from `start_revision` (0: from the next change). The
  // callback runs on a thread of the store, never inside the caller's call;
  // calls for one watch are serialized, calls for different watches may run
  // concurrently. It may call the store, and should return promptly (it holds
  // up later events of its watch). out_of_range if start_revision has been
  // compacted away: returned here, or (etcd, which learns it on its stream)
  // as the watch's first and final update.
  virtual Result<std::unique_ptr<Watch>> watch(const KeySpan& span, Revision start_revision,
                                               WatchCallback callback) = 0;
};

// Opens the store an endpoint names (docs/membership.md):
//   "" or "inproc"                   a new InProcessStore on the steady clock
//   "http://HOST:PORT", "etcd://HOST:PORT"
//                                    an etcd v3 server (etcd:// means http://)
// For etcd, checks that the server answers before returning: unavailable (or
// timed_out) if it does not, invalid_argument for a malformed endpoint.
Result<std::unique_ptr<MembershipStore>> open_store(std::string_view endpoint);

}  // namespace ferry::membership
