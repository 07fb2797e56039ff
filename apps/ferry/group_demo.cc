// `ferry demo`, part 2: a HyperLoop group -- a client and a chain of three
// replicas -- doing each primitive, with every replica verified after each
// step, a power-failure check of gFLUSH, and a latency comparison with the
// Naive-RDMA baseline. Every step is verified; a failed check exits non-zero.
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>

#include "demo.h"
#include "ferry/common/clock.h"
#include "ferry/common/histogram.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "report.h"

namespace ferry::apps {
namespace {

using namespace ferry::hyperloop;

uint64_t now_ns() { return SteadyClock::instance().now_ns(); }

class GroupDemo {
 public:
  GroupDemo(std::ostream& out, int engine_cpu) : out_(out), steps_(out) {
    nic::EngineOptions eo;
    eo.cpu = bench::usable_cpu(engine_cpu);
    engine_cpu_ = eo.cpu;
    engine_ = std::make_unique<nic::Engine>(eo);
  }
  int run();

 private:
  bool replicas_hold(uint64_t offset, const void* bytes, size_t len) {
    for (uint32_t r = 0; r < kReplicas; ++r) {
      if (std::memcmp(client_->replica(gid_, r).value().region->data() + offset, bytes, len) != 0) return false;
    }
    return true;
  }
  // Seeds (of `seeds` per replica) under which a power failure loses any of
  // [offset, offset+len) on some replica.
  int lost_under(uint64_t offset, const void* bytes, size_t len, int seeds) {
    int lost = 0;
    for (int s = 0; s < seeds; ++s) {
      for (uint32_t r = 0; r < kReplicas; ++r) {
        ReplicaView v = client_->replica(gid_, r).value();
        auto image = v.domain->image_after_power_fail(*v.region, static_cast<uint64_t>(s) * 31 + r);
        if (std::memcmp(image.data() + offset, bytes, len) != 0) {
          ++lost;
          break;
        }
      }
    }
    return lost;
  }
  static uint64_t word(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }

  static constexpr uint32_t kReplicas = 3;
  std::ostream& out_;
  int engine_cpu_ = -1;
  std::unique_ptr<nic::Engine> engine_;
  std::unique_ptr<HyperLoopClient> client_;
  GroupId gid_ = 0;
  DemoSteps steps_;
};

int GroupDemo::run() {
  out_ << "\n\nFerry demo, part 2: HyperLoop group primitives\n"
       << "A client and a chain of 3 replicas, each an emulated host with its own NIC and its own persistent\n"
       << "memory (a libpmem2-mapped file under /dev/shm; Ferry's model decides what a power failure keeps).\n"
       << "At setup each replica's application thread pre-posts WQE chains on its NIC, then blocks for good:\n"
       << "from then on the NICs run every operation -- RECV rewrites the pre-posted WQEs, WAIT triggers them,\n"
       << "the tail acknowledges the client. One engine thread"
       << (engine_cpu_ >= 0 ? fmt::format(" (pinned to CPU {})", engine_cpu_) : std::string(" (not pinned)"))
       << " plays all four NICs.\n";
  client_ = HyperLoopClient::create(*engine_).value();
  GroupOptions o;
  o.replicas = kReplicas;
  o.region_bytes = 2 << 20;
  auto gid = client_->create_group(o);
  if (!steps_.check(gid.ok(), "group created: " + gid.status().to_string())) return 1;
  gid_ = gid.value();
  auto mem = client_->client_memory(gid_).value();

  steps_.step("gWRITE", "The client replicates a log record from its memory to offset 0 of every replica.");
  const char* record = "txn 42: balance[alice] -= 10; balance[bob] += 10";
  const size_t record_len = std::strlen(record) + 1;
  std::memcpy(mem.data(), record, record_len);
  steps_.check(client_->gwrite(gid_, 0, static_cast<uint32_t>(record_len)).ok(), "acknowledged by the tail");
  steps_.check(replicas_hold(0, record, record_len), "all 3 replicas hold the record");
  // From here on, the replicas' application threads are blocked for good.
  const uint64_t cpu_after_setup = client_->replica_cpu_ns();

  steps_.step("Durability without gFLUSH",
              "An acknowledged gWRITE may still sit in a NIC's volatile write buffer. Probe 200 power-failure seeds.");
  const int lost_before = lost_under(0, record, record_len, 200);
  out_ << fmt::format("    lost on some replica under {} of 200 seeds\n", lost_before);
  steps_.check(lost_before > 0, "an unflushed gWRITE can be lost");

  steps_.step("gFLUSH", "A 0-byte READ per hop drains each replica's NIC buffer before the chain moves on.");
  steps_.check(client_->gflush(gid_).ok(), "gflush acknowledged");
  steps_.check(lost_under(0, record, record_len, 200) == 0,
               "now survives all 200 power-failure seeds on every replica");
  const char* record2 = "txn 43: balance[bob] -= 5; balance[carol] += 5";
  const size_t record2_len = std::strlen(record2) + 1;
  std::memcpy(mem.data() + 256, record2, record2_len);
  steps_.check(client_->gwrite(gid_, 256, static_cast<uint32_t>(record2_len), /*flush=*/true).ok() &&
                   lost_under(256, record2, record2_len, 200) == 0,
               "a gWRITE with interleaved gFLUSH is durable on every replica when acknowledged");

  steps_.step("gCAS as a group lock",
              "Compare-and-swap word 8192 on every replica: 0 -> 1 means 'locked by client 1'.");
  auto lock = client_->gcas(gid_, 8192, 0, 1, 0b111);
  steps_.check(lock.ok() && lock->succeeded == 0b111,
               lock.ok() ? fmt::format("result map: replicas saw [{}, {}, {}], all swapped", lock->original[0],
                                       lock->original[1], lock->original[2])
                         : "gCAS failed: " + lock.status().to_string());
  // Another client holds the lock on replica 2 (a divergence a real system
  // can see after a partial failure).
  uint8_t* r2 = client_->replica(gid_, 2).value().region->data();
  const uint64_t other = 8992;
  const uint64_t held = 7;
  std::memcpy(r2 + other, &held, 8);
  auto partial = client_->gcas(gid_, other, 0, 1, 0b111);
  steps_.check(partial.ok() && partial->succeeded == 0b011,
               fmt::format("word {}: replica 2 held 7, so only replicas 0 and 1 swapped (succeeded map 0b{:03b})",
                           other, partial.ok() ? partial->succeeded : 0));
  auto undo = client_->gcas(gid_, other, 1, 0, partial.ok() ? partial->succeeded : 0);
  steps_.check(undo.ok() && undo->succeeded == 0b011 &&
                   word(client_->replica(gid_, 0).value().region->data() + other) == 0 && word(r2 + other) == 7,
               "undo: gCAS(new -> old) on exactly the replicas that succeeded; replica 2 untouched");

  steps_.step("gMEMCPY",
              "Apply the log: every replica's NIC copies the record from the log (0) to the data area (65536).");
  steps_.check(client_->gmemcpy(gid_, 0, 65536, static_cast<uint32_t>(record_len), /*flush=*/true).ok(),
               "acknowledged");
  steps_.check(replicas_hold(65536, record, record_len), "each replica copied its own bytes");

  steps_.step("Pipelined gWRITEs", "5,000 asynchronous 256-byte gWRITEs, up to 16 in the chain at once.");
  for (size_t i = 0; i < 5000 * 256; ++i) mem[131072 + i] = static_cast<uint8_t>(i * 7 + 1);
  int done = 0;
  Status first_error;
  const uint64_t t0 = now_ns();
  for (int i = 0; i < 5000; ++i) {
    Status submitted = client_->gwrite_async(gid_, 131072 + static_cast<uint64_t>(i) * 256, 256, false,
                                [&](const OpResult& r) {
                                  if (!r.status.ok() && first_error.ok()) first_error = r.status;
                                  done += r.status.ok();
                                });
    if (!submitted.ok() && first_error.ok()) first_error = submitted;
  }
  const bool drained = client_->drain(gid_).ok();
  const double secs = static_cast<double>(now_ns() - t0) / 1e9;
  steps_.check(drained && done == 5000, fmt::format("5,000 completed in order, {:.0f} operations/s{}", 5000 / secs,
                                                    first_error.ok() ? "" : " -- " + first_error.to_string()));
  steps_.check(replicas_hold(131072, mem.data() + 131072, 5000 * 256), "every replica identical to the client's bytes");

  steps_.step("Latency and replica CPU",
              "2,000 of each primitive, one at a time; then the same gWRITEs on Naive-RDMA.");
  auto measure = [&](GroupClient& c, GroupId g, int which) -> Result<Histogram> {
    Histogram h;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t a = now_ns();
      Status s;
      if (which == 0) s = c.gwrite(g, 4096 + (i % 64) * 64, 64);
      if (which == 1) s = c.gcas(g, 16384, static_cast<uint64_t>(i), static_cast<uint64_t>(i) + 1, 0b111).status();
      if (which == 2) s = c.gmemcpy(g, 0, 32768, 64);
      if (!s.ok()) return s;
      h.record(now_ns() - a);
    }
    return h;
  };
  const char* names[] = {"gWRITE 64 B", "gCAS", "gMEMCPY 64 B"};
  for (int which = 0; which < 3; ++which) {
    const Result<Histogram> h = measure(*client_, gid_, which);
    if (!h.ok()) {
      steps_.check(false, fmt::format("hyperloop {}: {}", names[which], h.status().to_string()));
      continue;
    }
    out_ << fmt::format("    hyperloop    {:<13} p50 {:6.1f} us  p99 {:6.1f} us\n", names[which],
                        static_cast<double>(h->percentile(0.5)) / 1000,
                        static_cast<double>(h->percentile(0.99)) / 1000);
  }
  const uint64_t hl_cpu = client_->replica_cpu_ns() - cpu_after_setup;
  steps_.check(hl_cpu == 0,
               fmt::format("HyperLoop replica application threads used {} ns of CPU for all of the above", hl_cpu));
  {
    auto naive = NaiveClient::create(*engine_, NaiveOptions{}).value();
    GroupOptions no = o;
    auto ng = naive->create_group(no);
    if (steps_.check(ng.ok(), "naive-event group created")) {
      const uint64_t before = naive->replica_cpu_ns();
      const Result<Histogram> h = measure(*naive, ng.value(), 0);
      const double per_op = static_cast<double>(naive->replica_cpu_ns() - before) / 2000.0;
      if (!h.ok()) {
        steps_.check(false, "naive-event " + std::string(names[0]) + ": " + h.status().to_string());
      } else {
        out_ << fmt::format("    naive-event  {:<13} p50 {:6.1f} us  p99 {:6.1f} us  replica CPU {:.0f} ns/op\n",
                            names[0], static_cast<double>(h->percentile(0.5)) / 1000,
                            static_cast<double>(h->percentile(0.99)) / 1000, per_op);
        steps_.check(h->count() == 2000 && per_op > 0, "the baseline's replica threads woke for every operation");
      }
    }
  }
  out_ << "    (`ferry bench group` runs the paper's experiments, quiet and with the replica CPU loaded.)\n";

  return steps_.summary();
}

}  // namespace

int run_group_demo(std::ostream& out, int engine_cpu) {
  GroupDemo demo(out, engine_cpu);
  return demo.run();
}

}  // namespace ferry::apps
