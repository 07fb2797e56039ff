#include "store_points.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <thread>

#include "common.h"
#include "cpu_load.h"
#include "ferry/common/rng.h"
#include "ferry/workload/zipf.h"
#include "load_loop.h"
#include "store_report.h"

namespace ferry::bench::store_bench {
namespace {

// Open loop: returns at `t_ns` (timing_clock). Sleeps while the time is far
// (the caller set a 1 ns timer slack), then yields: a late wakeup would count
// against the system measured, and a spin would take the client's CPU from
// RocksDB's threads.
void store_wait_until(uint64_t t_ns) {
  for (;;) {
    const uint64_t now = now_ns();
    if (now >= t_ns) return;
    if (t_ns - now > 400'000) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(t_ns - now - 250'000));
    } else {
      std::this_thread::yield();
    }
  }
}

// The Recorder's kinds of operation, in the report's (alphabetical) order.
enum Op : size_t { kInsert, kRead, kRmw, kScan, kUpdate, kOps };
constexpr std::array<const char*, kOps> kOpNames = {"insert", "read", "rmw", "scan", "update"};

// The load target (load_loop.h): the workload's operations, one at a time
// (synchronous), each drawn untimed before it starts -- in step(), after the
// previous one and the system's untimed work (between_ops(), or idle() until
// the next arrival), in the order the draws always had, so a seed gives the
// same operations.
class YcsbLoad {
 public:
  static constexpr bool kSynchronous = true;

  YcsbLoad(YcsbTarget& s, const std::string& name, char workload, const StoreBenchOptions& o, bool open,
           uint64_t* inserted, PointResult* r, Recorder& rec)
      : s_(s),
        name_(name),
        workload_(workload),
        o_(o),
        open_(open),
        inserted_(inserted),
        r_(r),
        rec_(rec),
        rng_(o.seed * 31 + static_cast<uint64_t>(workload)),
        zipf_(0, o.records + expected_inserts(workload, o.ops)),
        latest_(std::max<uint64_t>(o.records, 2) - 1),
        value_(o.value_bytes) {
    draw();
  }

  Status issue(uint64_t at_ns) {
    Status st;
    if (op_ == kRead) {
      st = s_.read(key_of(key_, o_.key_bytes));
    } else if (op_ == kScan) {
      auto got = s_.scan(key_of(key_, o_.key_bytes), scan_length_);
      st = got.status();
      if (got.ok()) r_->scanned += *got;
    } else if (op_ == kUpdate) {
      st = s_.write(key_of(key_, o_.key_bytes), value_);
    } else if (op_ == kInsert) {
      st = s_.insert(key_of((*inserted_)++, o_.key_bytes), value_);
    } else {
      st = s_.read_modify_write(key_of(key_, o_.key_bytes), value_);
    }
    const uint64_t t1 = now_ns();
    if (!st.ok()) {
      return Status(st.code(), name_ + " YCSB-" + workload_ + " " + kOpNames[op_] + ": " + st.message());
    }
    rec_.record(op_, at_ns, t1);
    if (op_ != kRead && op_ != kScan) ++r_->writes;
    drawn_ = false;
    return ok_status();
  }

  // Closed loop: the system's work between operations. Open loop: its work
  // that fits before the next arrival (until_ns; 0: one is due now), then
  // the wait for it.
  Status step(uint64_t until_ns) {
    if (!open_) {
      FERRY_RETURN_IF_ERROR(s_.between_ops());
      if (!drawn_) draw();
      return ok_status();
    }
    FERRY_RETURN_IF_ERROR(s_.idle(until_ns));
    if (!drawn_) draw();
    if (until_ns != 0) {
      const uint64_t t0 = now_ns();
      store_wait_until(until_ns);
      waited_ns_ += now_ns() - t0;
    }
    return ok_status();
  }

  uint64_t waited_ns() const { return waited_ns_; }

 private:
  // YCSB's insert proportion of each workload (D and E: 0.05), and the keys
  // CoreWorkload expects them to add: operations x proportion x 2 ("2 is
  // fudge factor").
  static uint64_t expected_inserts(char workload, uint64_t ops) {
    const double proportion = workload == 'D' || workload == 'E' ? 0.05 : 0.0;
    return static_cast<uint64_t>(static_cast<double>(ops) * proportion * 2.0);
  }

  // CoreWorkload.nextKeynum: D's "latest" records counted back from the
  // newest; the others' scrambled Zipfian over the records plus the expected
  // inserts (so the hot keys do not move as records are added), drawn again
  // while it names a record not inserted yet.
  uint64_t next_key() {
    const uint64_t newest = *inserted_ - 1;
    if (workload_ == 'D') return newest == 0 ? 0 : latest_.next(rng_, newest);  // one record: it is the latest
    uint64_t k;
    do {
      k = zipf_.next(rng_);
    } while (k > newest);
    return k;
  }

  void draw() {
    const double u = rng_.uniform();
    key_ = next_key();
    if (workload_ == 'D') {
      // Reads of recent records, 5 % inserts.
      op_ = u < 0.05 ? kInsert : kRead;
    } else if (workload_ == 'E') {
      // Scans of uniform length 1..100 from a Zipfian key, 5 % inserts.
      op_ = u < 0.05 ? kInsert : kScan;
    } else if (workload_ == 'F') {
      op_ = u < 0.5 ? kRmw : kRead;
    } else {
      const double update = workload_ == 'A' ? 0.5 : 0.05;
      op_ = u < update ? kUpdate : kRead;
    }
    for (auto& b : value_) b = static_cast<uint8_t>(rng_.next());
    scan_length_ = 1 + static_cast<uint32_t>(rng_.below(kScanLengthMax));
    drawn_ = true;
  }

  YcsbTarget& s_;
  const std::string& name_;
  char workload_;
  const StoreBenchOptions& o_;
  bool open_;
  uint64_t* inserted_;
  PointResult* r_;
  Recorder& rec_;
  Rng rng_;
  workload::ScrambledZipfianGenerator zipf_;
  workload::SkewedLatestGenerator latest_;
  std::vector<uint8_t> value_;
  // The next operation.
  bool drawn_ = false;
  Op op_ = kRead;
  uint64_t key_ = 0;
  uint32_t scan_length_ = 0;
  uint64_t waited_ns_ = 0;  // open loop: sleeping or yielding until the next arrival
};

}  // namespace

Status run_point(YcsbTarget& s, const std::string& name, char workload, const StoreBenchOptions& o, double rate,
                 uint64_t* inserted, PointResult* r) {
  // A counted window, o.ops operations, capped at max_seconds; a capped
  // point stops there (no drain: what is left of the open loop's arrivals
  // is not run).
  LoopPlan plan = LoopPlan::counted(0, o.ops, o.max_seconds);
  plan.drain_cap_ns = 0;
  Recorder rec(kOps);
  const bool open = rate > 0;
  if (open) (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // sleeps end on time (store_wait_until)
  YcsbLoad load(s, name, workload, o, open, inserted, r, rec);
  const uint64_t cpu0 = s.replica_cpu_ns();
  const std::optional<uint64_t> idle0 = s.nic_idle_ns();
  const std::optional<uint64_t> trav0 = s.traversals();
  const std::optional<int> read_tid = s.read_server_tid();
  const SchedStat read0 = read_tid ? read_schedstat(getpid(), *read_tid) : SchedStat{};
  LoopOutcome out;
  if (open) {
    Backlog backlog(o.ops);
    FERRY_ASSIGN_OR_RETURN(
        out, run_open(load, rec, plan, Arrivals{rate, o.seed * 131 + static_cast<uint64_t>(workload)}, backlog,
                      timing_clock()));
  } else {
    FERRY_ASSIGN_OR_RETURN(out, run_closed(load, rec, plan, timing_clock()));
  }
  r->replica_cpu_ns = s.replica_cpu_ns() - cpu0;
  if (idle0) r->client_idle_ns = *s.nic_idle_ns() - *idle0 + load.waited_ns();
  if (trav0) r->traversals = *s.traversals() - *trav0;
  if (read_tid) {
    const SchedStat read1 = read_schedstat(getpid(), *read_tid);
    r->read_server = SchedStat{read1.run_ns - read0.run_ns, read1.wait_ns - read0.wait_ns};
  }
  r->seconds = out.seconds();
  r->capped = out.capped;
  r->total = rec.all().count();
  for (size_t k = 0; k < kOps; ++k) {
    if (rec.of(k).count() > 0) r->ops[kOpNames[k]].hist = rec.of(k);
  }
  return ok_status();
}

Status run_points(YcsbTarget& target, const PointContext& c, const std::vector<std::string>& workloads,
                  const StoreBenchOptions& o, const Placement& placement, std::ostream& out, UpdateTails* tails) {
  uint64_t inserted = o.records;
  for (const auto& wl : workloads) {
    // The load guard: the client/NIC core's work item, quiet before the
    // workload's points, then during each (measured as the load starts and
    // again after the point, before it stops).
    Histogram quiet_base = time_work_item(kGuardSamples);
    for (const auto& load_name : o.loads) {
      std::unique_ptr<CpuLoad> load;
      Histogram during;
      if (load_name == "load") {
        FERRY_ASSIGN_OR_RETURN(
            load, CpuLoad::start(o.replica_cpu, static_cast<int>(o.load_processes), o.max_seconds * 2 + 30));
        during = time_work_item(kGuardSamples);
      }
      PointResult r;
      FERRY_RETURN_IF_ERROR(run_point(target, c.system, wl[0], o, c.rate, &inserted, &r));
      const Histogram after = time_work_item(kGuardSamples);
      const std::string load_text = load ? load->description() : "none";
      load.reset();
      during.merge(after);
      r.guard.base = quiet_base;
      r.guard.during = during;
      if (load_name != "load") quiet_base.merge(after);  // quiet again: the loaded twin's reference too
      ++tails->points;
      if (r.guard.disturbed()) ++tails->disturbed;
      emit_point(c, wl, load_name, r, o, placement, load_text, out, tails);
    }
  }
  return ok_status();
}

}  // namespace ferry::bench::store_bench
