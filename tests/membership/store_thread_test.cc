// Store conformance: the same etcd v3 semantics checked on the in-process
// store (on a FakeClock) and on a real etcd started on loopback. Watches run
// on store threads, so this suite also runs under TSan.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "etcd_gateway.h"
#include "etcd_process.h"
#include "ferry/common/clock.h"
#include "ferry/membership/etcd_store.h"
#include "ferry/membership/in_process_store.h"
#include "membership_test_util.h"

namespace ferry::membership::testing {
namespace {

// The in-process store on fake time: leases expire when the test says.
class InProcessEnv {
 public:
  static constexpr int kCasIncrementsPerThread = 250;
  Status start() {
    InProcessStoreOptions options;
    options.clock = &clock_;
    store_ = std::make_unique<InProcessStore>(options);
    return ok_status();
  }
  MembershipStore& store() { return *store_; }
  void pass_time(int64_t seconds) {
    clock_.advance_ns(static_cast<uint64_t>(seconds) * 1'000'000'000);
    store_->expire_leases();
  }

 private:
  FakeClock clock_;
  std::unique_ptr<InProcessStore> store_;
};

// A real etcd: time passes by itself, tests await its effects.
class EtcdEnv {
 public:
  static constexpr int kCasIncrementsPerThread = 25;
  Status start() {
    FERRY_ASSIGN_OR_RETURN(EtcdProcess * etcd, SharedEtcd::get());
    FERRY_ASSIGN_OR_RETURN(store_, EtcdStore::create(EtcdOptions{.endpoint = etcd->endpoint()}));
    return ok_status();
  }
  MembershipStore& store() { return *store_; }
  void pass_time(int64_t) {}

 private:
  std::unique_ptr<EtcdStore> store_;
};

template <typename Env>
class StoreConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = env_.start();
    ASSERT_TRUE(s.ok()) << s.to_string();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = std::string("/conformance/") + info->test_suite_name() + "/" + info->name() + "/" + unique_suffix() + "/";
  }
  MembershipStore& store() { return env_.store(); }
  std::string key(const std::string& name) const { return prefix_ + name; }
  Revision current_revision() {
    Result<RangeResult> r = store().get(KeySpan::exactly(key("never-written")));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r.value().revision : 0;
  }

  Env env_;
  std::string prefix_;
};

class EnvNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, InProcessEnv> ? "InProcess" : "Etcd";
  }
};
using Envs = ::testing::Types<InProcessEnv, EtcdEnv>;
TYPED_TEST_SUITE(StoreConformance, Envs, EnvNames);

TYPED_TEST(StoreConformance, EveryChangeAdvancesTheRevisionByOne) {
  const Revision r0 = this->current_revision();
  ASSERT_GT(r0, 0);
  Result<Revision> put_a = this->store().put(this->key("a"), "1");
  ASSERT_TRUE(put_a.ok()) << put_a.status().to_string();
  EXPECT_EQ(put_a.value(), r0 + 1);
  Result<Revision> put_a2 = this->store().put(this->key("a"), "2");
  ASSERT_TRUE(put_a2.ok());
  EXPECT_EQ(put_a2.value(), r0 + 2);
  ASSERT_TRUE(this->store().put(this->key("b"), std::string("\0\xff binary", 9)).ok());

  Result<RangeResult> range = this->store().get(KeySpan::prefix(this->prefix_));
  ASSERT_TRUE(range.ok()) << range.status().to_string();
  EXPECT_EQ(range.value().revision, r0 + 3);
  ASSERT_EQ(range.value().kvs.size(), 2u);
  const KeyValue& a = range.value().kvs[0];
  EXPECT_EQ(a.key, this->key("a"));
  EXPECT_EQ(a.value, "2");
  EXPECT_EQ(a.create_revision, r0 + 1) << "a second put keeps the incarnation";
  EXPECT_EQ(a.mod_revision, r0 + 2);
  EXPECT_EQ(a.version, 2);
  EXPECT_EQ(range.value().kvs[1].value, std::string("\0\xff binary", 9)) << "values are bytes";

  Result<DeleteResult> none = this->store().erase(KeySpan::exactly(this->key("absent")));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value().deleted, 0);
  EXPECT_EQ(none.value().revision, r0 + 3) << "deleting nothing is not a change";
  Result<DeleteResult> del = this->store().erase(KeySpan::exactly(this->key("a")));
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del.value().deleted, 1);
  EXPECT_EQ(del.value().revision, r0 + 4);
  Result<RangeResult> gone = this->store().get(KeySpan::exactly(this->key("a")));
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone.value().kvs.empty());

  Result<Revision> again = this->store().put(this->key("a"), "3");
  ASSERT_TRUE(again.ok());
  Result<RangeResult> reborn = this->store().get(KeySpan::exactly(this->key("a")));
  ASSERT_TRUE(reborn.ok());
  ASSERT_EQ(reborn.value().kvs.size(), 1u);
  EXPECT_EQ(reborn.value().kvs[0].create_revision, again.value()) << "a key put after a delete is a new incarnation";
  EXPECT_EQ(reborn.value().kvs[0].version, 1);
}

TYPED_TEST(StoreConformance, PrefixReadsOnlyTheirPrefix) {
  ASSERT_TRUE(this->store().put(this->key("g/x"), "1").ok());
  ASSERT_TRUE(this->store().put(this->key("g/y"), "2").ok());
  ASSERT_TRUE(this->store().put(this->key("g0"), "3").ok());  // '0' follows '/'
  ASSERT_TRUE(this->store().put(this->key("f"), "4").ok());
  Result<RangeResult> r = this->store().get(KeySpan::prefix(this->key("g/")));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().kvs.size(), 2u);
  EXPECT_EQ(r.value().kvs[0].key, this->key("g/x"));
  EXPECT_EQ(r.value().kvs[1].key, this->key("g/y"));
  Result<DeleteResult> d = this->store().erase(KeySpan::prefix(this->key("g/")));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().deleted, 2);
  Result<RangeResult> rest = this->store().get(KeySpan::prefix(this->prefix_));
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest.value().kvs.size(), 2u);
}

TYPED_TEST(StoreConformance, CompareAndSwapWinsOnlyAtTheExpectedModRevision) {
  const std::string k = this->key("cas");
  Result<TxnResult> create = this->store().compare_and_swap(k, 0, Mutation::put(k, "v1"));
  ASSERT_TRUE(create.ok()) << create.status().to_string();
  EXPECT_TRUE(create.value().succeeded) << "0 = the key must be absent, and it was";
  const Revision v1 = create.value().revision;

  Result<TxnResult> create_again = this->store().compare_and_swap(k, 0, Mutation::put(k, "other"));
  ASSERT_TRUE(create_again.ok());
  EXPECT_FALSE(create_again.value().succeeded) << "the key exists now";
  EXPECT_EQ(create_again.value().revision, v1) << "a lost comparison changes nothing";

  Result<TxnResult> update = this->store().compare_and_swap(k, v1, Mutation::put(k, "v2"));
  ASSERT_TRUE(update.ok());
  EXPECT_TRUE(update.value().succeeded);
  Result<TxnResult> stale = this->store().compare_and_swap(k, v1, Mutation::put(k, "stale"));
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale.value().succeeded) << "a writer that read v1 must lose after v2";

  Result<RangeResult> r = this->store().get(KeySpan::exactly(k));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().kvs.size(), 1u);
  EXPECT_EQ(r.value().kvs[0].value, "v2");
  EXPECT_EQ(r.value().kvs[0].mod_revision, update.value().revision);

  Result<TxnResult> absent = this->store().compare_and_swap(this->key("absent"), 5, Mutation::put(this->key("x"), "1"));
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent.value().succeeded) << "an absent key's mod_revision is 0";

  Result<TxnResult> erase = this->store().compare_and_swap(k, update.value().revision, Mutation::erase(k));
  ASSERT_TRUE(erase.ok());
  EXPECT_TRUE(erase.value().succeeded);
  Result<RangeResult> gone = this->store().get(KeySpan::exactly(k));
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone.value().kvs.empty());
}

TYPED_TEST(StoreConformance, LeaseExpiryDeletesItsKeysInOneRevisionAndFiresDeleteEvents) {
  Result<Lease> lease = this->store().grant_lease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().to_string();
  EXPECT_GE(lease.value().ttl_seconds, 2);
  ASSERT_TRUE(this->store().put(this->key("a"), "1", lease.value().id).ok());
  ASSERT_TRUE(this->store().put(this->key("b"), "2", lease.value().id).ok());
  ASSERT_TRUE(this->store().put(this->key("c"), "3").ok());
  EventLog log;
  Result<std::unique_ptr<Watch>> watch = this->store().watch(KeySpan::prefix(this->prefix_), 0, log.callback());
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();

  // No keep-alive from here on.
  this->env_.pass_time(lease.value().ttl_seconds + 1);
  ASSERT_TRUE(log.await_count(2)) << "lease expiry fired no delete events; got: " << keys_of(log.events());
  const std::vector<Event> events = log.events();
  ASSERT_EQ(events.size(), 2u) << keys_of(events);
  for (const Event& e : events) EXPECT_EQ(e.type, Event::Type::kDelete) << keys_of(events);
  EXPECT_EQ(events[0].kv.key, this->key("a"));
  EXPECT_EQ(events[1].kv.key, this->key("b"));
  EXPECT_EQ(events[0].revision(), events[1].revision()) << "one lease, one revision";

  Result<RangeResult> r = this->store().get(KeySpan::prefix(this->prefix_));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().kvs.size(), 1u);
  EXPECT_EQ(r.value().kvs[0].key, this->key("c")) << "keys without the lease stay";
  EXPECT_EQ(this->store().keep_alive(lease.value().id).status().code(), Code::kNotFound);
  EXPECT_EQ(this->store().put(this->key("d"), "4", lease.value().id).status().code(), Code::kNotFound)
      << "a put under an expired lease must fail, not create an immortal key";
}

TYPED_TEST(StoreConformance, RevokeDeletesTheLeasesKeysNow) {
  Result<Lease> lease = this->store().grant_lease(60);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(this->store().put(this->key("a"), "1", lease.value().id).ok());
  Result<int64_t> ttl = this->store().keep_alive(lease.value().id);
  ASSERT_TRUE(ttl.ok()) << ttl.status().to_string();
  EXPECT_EQ(ttl.value(), lease.value().ttl_seconds);
  const Revision before = this->current_revision();
  ASSERT_TRUE(this->store().revoke_lease(lease.value().id).ok());
  EXPECT_EQ(this->current_revision(), before + 1);
  Result<RangeResult> r = this->store().get(KeySpan::exactly(this->key("a")));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().kvs.empty());
  EXPECT_EQ(this->store().revoke_lease(lease.value().id).code(), Code::kNotFound);
  EXPECT_EQ(this->store().keep_alive(lease.value().id).status().code(), Code::kNotFound);
}

TYPED_TEST(StoreConformance, WatchFromAPastRevisionReplaysEveryEventInOrder) {
  Result<Revision> r1 = this->store().put(this->key("a"), "1");
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(this->store().put(this->key("b"), "2").ok());
  ASSERT_TRUE(this->store().put(this->key("a"), "3").ok());
  ASSERT_TRUE(this->store().erase(KeySpan::exactly(this->key("b"))).ok());
  ASSERT_TRUE(this->store().put(this->key("outside"), "x").ok());  // not in the watched span below

  EventLog log;
  Result<std::unique_ptr<Watch>> watch =
      this->store().watch(KeySpan::prefix(this->key("")), r1.value(), log.callback());
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(log.await_count(5)) << keys_of(log.events());
  const std::vector<Event> e = log.events();
  ASSERT_EQ(e.size(), 5u) << keys_of(e);
  for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i].revision(), r1.value() + static_cast<Revision>(i));
  EXPECT_EQ(e[0].kv.value, "1");
  EXPECT_EQ(e[2].kv.value, "3");
  EXPECT_EQ(e[2].kv.create_revision, r1.value());
  EXPECT_EQ(e[3].type, Event::Type::kDelete);
  EXPECT_EQ(e[3].kv.key, this->key("b"));
  EXPECT_EQ(e[4].kv.key, this->key("outside"));

  // A watch on one key sees that key only.
  EventLog one;
  Result<std::unique_ptr<Watch>> one_watch =
      this->store().watch(KeySpan::exactly(this->key("a")), r1.value(), one.callback());
  ASSERT_TRUE(one_watch.ok());
  ASSERT_TRUE(one.await_count(2));
  ASSERT_TRUE(this->store().put(this->key("ab"), "not a").ok());
  ASSERT_TRUE(this->store().put(this->key("a"), "4").ok());
  ASSERT_TRUE(one.await_count(3));
  for (const Event& ev : one.events()) EXPECT_EQ(ev.kv.key, this->key("a")) << keys_of(one.events());
}

TYPED_TEST(StoreConformance, RangeThenWatchFromTheNextRevisionMissesNothing) {
  ASSERT_TRUE(this->store().put(this->key("before"), "0").ok());
  Result<RangeResult> read = this->store().get(KeySpan::prefix(this->prefix_));
  ASSERT_TRUE(read.ok());
  const Revision r = read.value().revision;
  // A change between the read and the watch: exactly what a reader must not miss.
  ASSERT_TRUE(this->store().put(this->key("between"), "1").ok());
  EventLog log;
  Result<std::unique_ptr<Watch>> watch = this->store().watch(KeySpan::prefix(this->prefix_), r + 1, log.callback());
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(this->store().put(this->key("after"), "2").ok());
  ASSERT_TRUE(log.await_count(2)) << keys_of(log.events());
  const std::vector<Event> e = log.events();
  ASSERT_EQ(e.size(), 2u) << keys_of(e);
  EXPECT_EQ(e[0].kv.key, this->key("between"));
  EXPECT_EQ(e[0].revision(), r + 1);
  EXPECT_EQ(e[1].kv.key, this->key("after"));
}

TYPED_TEST(StoreConformance, CancelStopsDelivery) {
  EventLog log;
  Result<std::unique_ptr<Watch>> watch = this->store().watch(KeySpan::prefix(this->prefix_), 0, log.callback());
  ASSERT_TRUE(watch.ok());
  ASSERT_TRUE(this->store().put(this->key("1"), "x").ok());
  ASSERT_TRUE(log.await_count(1));
  watch.value()->cancel();
  const size_t seen = log.events().size();
  ASSERT_TRUE(this->store().put(this->key("2"), "x").ok());
  ASSERT_TRUE(this->store().put(this->key("3"), "x").ok());
  // A second watch that sees the later puts shows they were delivered to
  // whoever was still watching.
  EventLog sentinel;
  Result<std::unique_ptr<Watch>> later =
      this->store().watch(KeySpan::prefix(this->prefix_), this->current_revision() - 1, sentinel.callback());
  ASSERT_TRUE(later.ok());
  ASSERT_TRUE(sentinel.await_count(2));
  EXPECT_EQ(log.events().size(), seen) << "a cancelled watch delivered " << keys_of(log.events());
}

TYPED_TEST(StoreConformance, ACallbackMayCancelItsOwnWatch) {
  struct Slot {
    std::mutex mu;
    Watch* watch = nullptr;
  } slot;
  EventLog log;
  WatchCallback record = log.callback();
  std::atomic<int> calls{0};
  Result<std::unique_ptr<Watch>> watch =
      this->store().watch(KeySpan::prefix(this->prefix_), 0, [&](const WatchUpdate& u) {
        calls.fetch_add(1);
        std::lock_guard lk(slot.mu);
        record(u);
        if (slot.watch != nullptr) slot.watch->cancel();
      });
  ASSERT_TRUE(watch.ok());
  {
    std::lock_guard lk(slot.mu);
    slot.watch = watch.value().get();
  }
  ASSERT_TRUE(this->store().put(this->key("1"), "x").ok());
  ASSERT_TRUE(log.await_count(1));
  ASSERT_TRUE(this->store().put(this->key("2"), "x").ok());
  EventLog sentinel;
  Result<std::unique_ptr<Watch>> later =
      this->store().watch(KeySpan::prefix(this->prefix_), this->current_revision(), sentinel.callback());
  ASSERT_TRUE(later.ok());
  ASSERT_TRUE(sentinel.await_count(1));
  EXPECT_EQ(calls.load(), 1);
  watch.value().reset();
}

TYPED_TEST(StoreConformance, ManyThreadsCasIncrementingACounterNeverLoseAnUpdate) {
  constexpr int kThreads = 4;
  const int per_thread = TypeParam::kCasIncrementsPerThread;
  const std::string k = this->key("counter");
  ASSERT_TRUE(this->store().put(k, "0").ok());
  std::atomic<int> wins{0};
  std::atomic<int> losses{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int done = 0; done < per_thread;) {
        Result<RangeResult> r = this->store().get(KeySpan::exactly(k));
        if (!r.ok() || r.value().kvs.size() != 1) {
          errors.fetch_add(1);
          return;
        }
        const KeyValue& kv = r.value().kvs[0];
        const int value = std::stoi(kv.value);
        Result<TxnResult> cas =
            this->store().compare_and_swap(k, kv.mod_revision, Mutation::put(k, std::to_string(value + 1)));
        if (!cas.ok()) {
          errors.fetch_add(1);
          return;
        }
        if (cas.value().succeeded) {
          wins.fetch_add(1);
          ++done;
        } else {
          losses.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors.load(), 0);
  Result<RangeResult> r = this->store().get(KeySpan::exactly(k));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().kvs.at(0).value, std::to_string(kThreads * per_thread))
      << "wins " << wins.load() << ", losses " << losses.load();
  EXPECT_EQ(wins.load(), kThreads * per_thread);
}

TYPED_TEST(StoreConformance, BadArgumentsAreRejected) {
  EXPECT_EQ(this->store().put("", "x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(this->store().grant_lease(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(this->store().watch(KeySpan::prefix(this->prefix_), -1, [](const WatchUpdate&) {}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(this->store().put(this->key("x"), "1", 0x1234'5678).status().code(), Code::kNotFound) << "an unknown lease";
}

// ---- in-process only: fake time and compaction ----

TEST(InProcessStore, KeepAliveHoldsTheLeaseAcrossFakeTime) {
  FakeClock clock;
  InProcessStore store(InProcessStoreOptions{.clock = &clock, .expiry_poll_ms = 0});
  Result<Lease> lease = store.grant_lease(2);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.put("/k", "v", lease.value().id).ok());
  for (int i = 0; i < 10; ++i) {
    clock.advance_ns(1'500'000'000);
    ASSERT_TRUE(store.keep_alive(lease.value().id).ok()) << "at beat " << i;
  }
  EXPECT_EQ(store.get(KeySpan::exactly("/k")).value().kvs.size(), 1u);
  clock.advance_ns(2'000'000'000);  // exactly the TTL since the last keep-alive
  store.expire_leases();
  EXPECT_TRUE(store.get(KeySpan::exactly("/k")).value().kvs.empty());
}

TEST(InProcessStore, StoreThreadExpiresLeasesWithoutAnyOperation) {
  FakeClock clock;
  InProcessStore store(InProcessStoreOptions{.clock = &clock, .expiry_poll_ms = 1});
  Result<Lease> lease = store.grant_lease(1);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(store.put("/k", "v", lease.value().id).ok());
  EventLog log;
  Result<std::unique_ptr<Watch>> watch = store.watch(KeySpan::exactly("/k"), 0, log.callback());
  ASSERT_TRUE(watch.ok());
  clock.advance_ns(1'000'000'001);
  ASSERT_TRUE(log.await_count(1)) << "nobody expired the lease";
  EXPECT_EQ(log.events()[0].type, Event::Type::kDelete);
}

TEST(InProcessStore, CompactedRevisionsCannotBeWatched) {
  InProcessStore store(InProcessStoreOptions{.history_events_max = 4});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store.put("/k" + std::to_string(i), "v").ok());
  const Revision now = store.revision();
  EXPECT_EQ(store.watch(KeySpan::prefix("/"), 2, [](const WatchUpdate&) {}).status().code(), Code::kOutOfRange);
  EventLog log;
  Result<std::unique_ptr<Watch>> watch = store.watch(KeySpan::prefix("/"), now - 3, log.callback());
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();
  ASSERT_TRUE(log.await_count(4));
  EXPECT_EQ(log.events().front().revision(), now - 3);
}

// ---- etcd only: what the network can do wrong ----

TEST(EtcdStore, AnUnreachableEndpointIsUnavailableAndNamesIt) {
  Result<int> port = free_loopback_port();
  ASSERT_TRUE(port.ok());
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(port.value());
  Result<std::unique_ptr<MembershipStore>> store = open_store(endpoint);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kUnavailable) << store.status().to_string();
  EXPECT_NE(store.status().message().find(endpoint), std::string::npos) << store.status().to_string();
}

TEST(EtcdStore, MalformedEndpointsAreInvalidArguments) {
  for (const char* bad : {"localhost:2379", "ftp://x:1", "http://", "http://host:1/path"}) {
    EXPECT_EQ(open_store(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

// A one-shot HTTP server on loopback answering every request with `reply`.
class FakeGateway {
 public:
  explicit FakeGateway(std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      const int conn = ::accept(fd_, nullptr, nullptr);
      if (conn < 0) return;
      char buf[4096];
      std::string request;
      // Read the headers and the (small) body before answering.
      while (request.find("\r\n\r\n") == std::string::npos || request.back() != '}') {
        const ssize_t n = ::read(conn, buf, sizeof(buf));
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      (void)!::write(conn, reply_.data(), reply_.size());
      ::close(conn);
    });
  }
  ~FakeGateway() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// POST `body` to etcd at `port` (one HTTP/1.1 request on its own
// connection), for the gateway calls MembershipStore does not offer.
std::string raw_post(int port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                              "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

TEST(EtcdStore, AWatchFromACompactedRevisionEndsWithOutOfRange) {
  Result<EtcdProcess*> etcd = SharedEtcd::get();
  ASSERT_TRUE(etcd.ok()) << etcd.status().to_string();
  Result<std::unique_ptr<EtcdStore>> store = EtcdStore::create(EtcdOptions{.endpoint = etcd.value()->endpoint()});
  ASSERT_TRUE(store.ok());
  const std::string prefix = "/compaction/" + unique_suffix() + "/";
  Result<Revision> first = store.value()->put(prefix + "k", "1");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  Result<Revision> last = store.value()->put(prefix + "k", "2");
  ASSERT_TRUE(last.ok());
  const int port = std::stoi(etcd.value()->endpoint().substr(etcd.value()->endpoint().rfind(':') + 1));
  const std::string answer =
      raw_post(port, "/v3/kv/compaction", "{\"revision\":\"" + std::to_string(last.value()) + "\"}");
  ASSERT_NE(answer.find("200 OK"), std::string::npos) << answer;

  EventLog log;
  Result<std::unique_ptr<Watch>> watch = store.value()->watch(KeySpan::prefix(prefix), first.value(), log.callback());
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();
  ASSERT_TRUE(log.await_end()) << "the watch neither ended nor reported the compaction";
  EXPECT_EQ(log.end().code(), Code::kOutOfRange) << log.end().to_string();
  EXPECT_TRUE(log.events().empty()) << keys_of(log.events());
  EXPECT_EQ(log.updates(), 1u);
}

TEST(EtcdStore, BadBytesFromTheNetworkAreErrorsNotCrashes) {
  struct Case {
    std::string reply;
    Code code;
    const char* says;
  };
  auto reply = [](const std::string& status_line, const std::string& body) {
    return "HTTP/1.1 " + status_line + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  };
  const std::vector<Case> cases = {
      {reply("200 OK", "{\"kvs\":"), Code::kUnavailable, "not JSON"},
      {reply("200 OK", "[]"), Code::kUnavailable, "not a JSON object"},
      {reply("200 OK", "{\"kvs\":[]}"), Code::kUnavailable, "no header"},
      {reply("200 OK", "{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"%%%\"}]}"), Code::kUnavailable, "base64"},
      {reply("200 OK", "{\"header\":{\"revision\":\"9x\"}}"), Code::kUnavailable, "int64"},
      {reply("502 Bad Gateway", "oops"), Code::kUnavailable, "HTTP 502"},
      {reply("404 Not Found",
             "{\"error\":\"etcdserver: requested lease not found\",\"code\":5,"
             "\"message\":\"etcdserver: requested lease not found\"}"),
       Code::kNotFound, "lease not found"},
      {"garbage\r\n\r\n", Code::kUnavailable, "127.0.0.1"},
  };
  for (const Case& c : cases) {
    FakeGateway gateway(c.reply);
    Result<std::unique_ptr<EtcdStore>> store = EtcdStore::create(EtcdOptions{.endpoint = gateway.endpoint()});
    ASSERT_TRUE(store.ok());
    Result<RangeResult> r = store.value()->get(KeySpan::exactly("/k"));
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), c.code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().to_string();
  }
}

}  // namespace
}  // namespace ferry::membership::testing
