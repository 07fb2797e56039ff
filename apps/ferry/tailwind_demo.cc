// `ferry demo`, part 4: Tailwind in LogKv, the RAMCloud-like store. PUTs
// replicated by one-sided RDMA WRITEs into three backups' PM buffers while
// the backups' workers see no replication request, a primary crash while a
// client is writing, recovery of its log by Algorithm 1 from the backups,
// and every acknowledged PUT served again by the servers that took over.
// Every step is verified; a failed check exits non-zero.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "demo.h"
#include "ferry/store/logkv.h"

namespace ferry::apps {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

class TailwindDemo {
 public:
  explicit TailwindDemo(std::ostream& out) : out_(out), steps_(out) {}

  int run() {
    out_ << "\n== Tailwind: one-sided log replication in a RAMCloud-like store ==\n";
    steps_.step("A LogKv cluster", "storage servers on one emulated fabric, each with its own NIC and PM; r = 3");
    store::logkv::ClusterOptions o;
    o.servers = 5;
    o.server.replicas = 3;
    o.server.workers = 1;
    o.server.segment_bytes = 256 << 10;
    o.server.replication = tailwind::Replication::kTailwind;
    auto cluster = store::logkv::Cluster::create(o);
    if (!steps_.check(cluster.ok(), "5 storage servers, each primary for its tablets and backup for the others: " +
                                        (cluster.ok() ? std::string("up") : cluster.status().to_string()))) {
      return steps_.summary();
    }
    auto& c = **cluster;
    auto table = c.create_table("demo");
    store::logkv::ClientOptions co;
    co.timeout_ns = 300'000'000;
    co.max_attempts = 30;
    // Server 2's tablets move only when its recovery ends, which takes longer
    // on a loaded machine than 30 attempts cover (seen under make test).
    co.retry_for_ms = 30'000;
    auto client = store::logkv::Client::create(c, co);
    if (!steps_.check(table.ok() && client.ok(), "table 'demo' spread over the 5 servers, a client routing by its map")) {
      return steps_.summary();
    }

    steps_.step("PUTs replicated by RDMA WRITE",
                "each PUT is appended to its server's log and written, with its checksum, straight from that log "
                "into 3 backups' pre-zeroed PM buffers by one RDMA WRITE + FLUSH each; the backups' CPUs do nothing");
    std::vector<uint64_t> backup_requests_before;
    for (uint32_t s = 0; s < c.servers(); ++s) {
      backup_requests_before.push_back(c.server(s).rpc().counters(o.server.workers).requests);
    }
    uint64_t writes_before = 0, segments_before = 0;
    for (uint32_t s = 0; s < c.servers(); ++s) {
      writes_before += c.server(s).log().counters().writes_posted;
      segments_before += c.server(s).log().counters().segments_opened + c.server(s).log().counters().segments_closed;
    }
    bool all_ok = true;
    for (int i = 0; i < 500; ++i) {
      const std::string key = fmt::format("user{:04}", i);
      auto v = (*client)->put(0, *table, bytes_of(key), bytes_of("value of " + key));
      all_ok = all_ok && v.ok();
      if (v.ok()) acked_[key] = *v;
    }
    uint64_t writes = 0, segments = 0, backup_requests = 0;
    for (uint32_t s = 0; s < c.servers(); ++s) {
      writes += c.server(s).log().counters().writes_posted;
      segments += c.server(s).log().counters().segments_opened + c.server(s).log().counters().segments_closed;
      backup_requests += c.server(s).rpc().counters(o.server.workers).requests - backup_requests_before[s];
    }
    steps_.check(all_ok, "500 PUTs acknowledged, each after all 3 replicas were durable");
    steps_.check(writes - writes_before >= 3 * 500,
                 fmt::format("{} RDMA WRITEs posted (3 per PUT, plus the segment headers)", writes - writes_before));
    steps_.check(backup_requests <= 3 * (segments - segments_before) + 3,
                 fmt::format("{} requests reached the backups' workers for 500 PUTs: only the opens and closes of "
                             "{} segment events, none per PUT",
                             backup_requests, segments - segments_before));

    steps_.step("A primary crashes while a client writes",
                "server 2 stops (its CPU and its DRAM -- its log and its index -- are gone); the other servers "
                "replace the replicas it held for them; a client keeps writing and retries what server 2 no longer "
                "answers");
    std::atomic<bool> stop{false};
    std::atomic<int> writer_failures{0};
    std::string first_failure;  // written by the writer, read after join
    std::map<std::string, uint64_t> acked_during;
    std::thread writer([&] {
      for (int i = 0; !stop.load() || i < 200; ++i) {
        const std::string key = fmt::format("late{:04}", i);
        auto v = (*client)->put(0, *table, bytes_of(key), bytes_of("value of " + key));
        if (v.ok()) {
          acked_during[key] = *v;
        } else {
          if (writer_failures.fetch_add(1) == 0) first_failure = v.status().to_string();
        }
        if (i >= 2000) break;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto on_victim = c.server(2).counters().objects;
    const Status crashed = c.crash_server(2);
    steps_.check(crashed.ok(), fmt::format("server 2 crashed holding {} objects; its replicas elsewhere replaced{}",
                                           on_victim, crashed.ok() ? "" : ": " + crashed.to_string()));

    steps_.step("Recovery by Algorithm 1",
                "every surviving backup fences server 2's log and scans its open buffer for the last valid checksum "
                "(closed ones are verified on storage); the replayed objects of each tablet are appended to a live "
                "server's own replicated log, and the tablet map moves");
    size_t reports = 0;
    auto rec = c.recover_server(2, [&](const store::logkv::RecoveryProgress&) { ++reports; });
    if (rec.ok()) {
      const auto& p = rec->progress;
      out_ << fmt::format("    progress ({} reports): {}/{} segments, {} entries replayed, {} objects restored\n",
                          reports, p.segments_done, p.segments_total, p.objects_replayed, p.objects_restored);
    }
    if (steps_.check(rec.ok(), rec.ok() ? fmt::format("recovered in {:.1f} ms: {} replicas seen, {} segments, "
                                                       "{} open replicas had bytes after their valid prefix",
                                                       rec->elapsed_ns / 1e6, rec->log.replicas_seen,
                                                       rec->log.segments, rec->log.torn_open)
                                        : rec.status().to_string())) {
      // The writer may still have added to server 2 between the count and the crash.
      steps_.check(rec->progress.objects_restored >= on_victim,
                   fmt::format("{} objects restored; server 2 held {} just before it crashed",
                               rec->progress.objects_restored, on_victim));
    }
    stop = true;
    writer.join();
    steps_.check(writer_failures == 0, fmt::format("the client's {} PUTs during the crash all completed ({} failed)",
                                                   acked_during.size(), writer_failures.load()) +
                                           (first_failure.empty() ? "" : "; the first: " + first_failure));

    steps_.step("The data is served again", "every acknowledged PUT, read back through the new tablet owners");
    size_t served = 0, wrong = 0;
    for (const auto* m : {&acked_, &acked_during}) {
      for (const auto& [key, version] : *m) {
        auto g = (*client)->get(0, *table, bytes_of(key));
        if (g.ok() && g->version == version &&
            std::string(g->value.begin(), g->value.end()) == "value of " + key) {
          ++served;
        } else {
          ++wrong;
        }
      }
    }
    steps_.check(wrong == 0, fmt::format("{} of {} acknowledged objects served with their versions and values", served,
                                         served + wrong));
    auto map = c.table("demo");
    bool moved = map.ok();
    if (map.ok()) {
      for (uint32_t owner : map->owners) moved = moved && owner != 2;
    }
    steps_.check(moved, "no tablet is served by server 2 any more");
    return steps_.summary();
  }

 private:
  std::ostream& out_;
  DemoSteps steps_;
  std::map<std::string, uint64_t> acked_;
};

}  // namespace

int run_tailwind_demo(std::ostream& out) { return TailwindDemo(out).run(); }

}  // namespace ferry::apps
