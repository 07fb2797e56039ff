#include "store_bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>

#include "cpu_load.h"
#include "group_bench.h"
#include "ferry/common/clock.h"
#include "ferry/common/cpu.h"
#include "ferry/common/histogram.h"
#include "ferry/common/rng.h"
#include "ferry/hyperloop/hyperloop.h"
#include "ferry/hyperloop/naive.h"
#include "ferry/hyperloop/txn_kv.h"
#include "ferry/workload/zipf.h"
#include "report.h"

namespace ferry::bench {

namespace {

using hyperloop::GroupClient;
using hyperloop::GroupId;

uint64_t now_ns() { return timing_clock().now_ns(); }

// One system's client, groups, transaction log and store.
struct StoreUnderTest {
  std::string name;
  std::unique_ptr<nic::Engine> engine;
  std::unique_ptr<GroupClient> client;
  GroupId data = 0, locks = 0;
  std::unique_ptr<hyperloop::TxnClient> txn;
  std::unique_ptr<hyperloop::TxnKv> kv;
  hyperloop::TxnKvOptions kv_options;
  ~StoreUnderTest() {
    kv.reset();
    txn.reset();
    client.reset();
    engine.reset();
  }
};

std::string key_of(uint64_t n, uint32_t key_bytes) {
  std::string k = fmt::format("user{:0{}}", n, key_bytes > 4 ? key_bytes - 4 : 1);
  k.resize(key_bytes, '0');
  return k;
}

Result<std::unique_ptr<StoreUnderTest>> start_store(const std::string& name, const StoreBenchOptions& o,
                                                    uint64_t capacity, std::ostream& log) {
  auto s = std::make_unique<StoreUnderTest>();
  s->name = name;
  nic::EngineOptions eo;
  eo.threaded = false;  // stepped by the client thread
  s->engine = std::make_unique<nic::Engine>(eo);
  FERRY_ASSIGN_OR_RETURN(s->client, make_group_client(name, *s->engine, o.replica_cpu));
  s->kv_options.slots = static_cast<uint32_t>(std::max<uint64_t>(64, capacity * 2));  // load factor <= 0.5
  s->kv_options.key_max = o.key_bytes;
  s->kv_options.value_max = o.value_bytes;
  s->kv_options.locks = 64;
  hyperloop::TxnOptions to;
  to.log_bytes = 1 << 20;
  to.db_bytes = hyperloop::txn_kv_db_bytes(s->kv_options);
  hyperloop::GroupOptions g;
  g.replicas = 3;
  g.region_bytes = (hyperloop::kTxnControlBytes + to.log_bytes + to.db_bytes + 4095) / 4096 * 4096;
  g.media = o.media;
  g.ring_ops = 128;
  g.window = 16;
  FERRY_ASSIGN_OR_RETURN(s->data, s->client->create_group(g));
  hyperloop::GroupOptions lg;
  lg.replicas = 3;
  lg.region_bytes = 4096;
  lg.media = pm::Media::kDram;  // lock words (hint H8)
  lg.ring_ops = 128;
  lg.window = 16;
  FERRY_ASSIGN_OR_RETURN(s->locks, s->client->create_group(lg));
  FERRY_ASSIGN_OR_RETURN(s->txn, hyperloop::TxnClient::initialize(*s->client, s->data, s->locks, to));
  FERRY_ASSIGN_OR_RETURN(s->kv, hyperloop::TxnKv::create(*s->txn, s->kv_options));
  // Load the records (quiet, untimed).
  const auto t0 = now_ns();
  Rng rng(o.seed);
  std::vector<uint8_t> value(o.value_bytes);
  for (uint64_t n = 0; n < o.records; ++n) {
    for (auto& b : value) b = static_cast<uint8_t>(rng.next());
    FERRY_RETURN_IF_ERROR(s->kv->put(key_of(n, o.key_bytes), value));
    if ((n + 1) % 20000 == 0) log << fmt::format("  {}: loaded {} of {} records\n", name, n + 1, o.records);
  }
  log << fmt::format("  {}: {} records loaded in {:.1f} s ({} slots, {} MB region per replica, {})\n", name,
                     o.records, static_cast<double>(now_ns() - t0) / 1e9, s->kv_options.slots,
                     g.region_bytes >> 20, o.media == pm::Media::kPm ? "PM" : "DRAM");
  return s;
}

constexpr uint64_t kScanLengthMax = 100;  // YCSB-E: uniform 1..100

struct OpStats {
  Histogram hist;
};

struct PointResult {
  std::map<std::string, OpStats> ops;  // by op: read, update, insert, rmw, scan
  uint64_t total = 0;
  uint64_t writes = 0;
  double seconds = 0;
  uint64_t replica_cpu_ns = 0;
  bool capped = false;
};

Status run_point(StoreUnderTest& s, char workload, const StoreBenchOptions& o, uint64_t* inserted,
                 PointResult* r) {
  Rng rng(o.seed * 31 + static_cast<uint64_t>(workload));
  workload::ScrambledZipfianGenerator zipf(o.records);
  hyperloop::TxnKvReplicaReader reader(
      s.txn->replica_db(2).value(),
      hyperloop::ReplicaLocks(s.client->replica(s.locks, 2).value().region->data(), 4096), s.kv_options);
  std::vector<uint8_t> value(o.value_bytes);
  const uint64_t cpu0 = s.client->replica_cpu_ns();
  const uint64_t start = now_ns();
  const uint64_t cap = start + static_cast<uint64_t>(o.max_seconds * 1e9);
  for (uint64_t i = 0; i < o.ops; ++i) {
    if (now_ns() > cap) {
      r->capped = true;
      break;
    }
    std::string op;
    const double u = rng.uniform();
    uint64_t key = zipf.next(rng) % o.records;
    if (workload == 'D') {
      // Reads of recent records, 5 % inserts.
      key = *inserted - 1 - std::min<uint64_t>(*inserted - 1, static_cast<uint64_t>(zipf.next(rng) % 1000));
      op = u < 0.05 ? "insert" : "read";
    } else if (workload == 'E') {
      // Scans of uniform length 1..100 from a Zipfian key, 5 % inserts.
      op = u < 0.05 ? "insert" : "scan";
    } else if (workload == 'F') {
      op = u < 0.5 ? "rmw" : "read";
    } else {
      const double update = workload == 'A' ? 0.5 : 0.05;
      op = u < update ? "update" : "read";
    }
    for (auto& b : value) b = static_cast<uint8_t>(rng.next());
    const uint32_t scan_length = 1 + static_cast<uint32_t>(rng.below(kScanLengthMax));
    const uint64_t t0 = now_ns();
    Status st;
    if (op == "read") {
      st = reader.get(key_of(key, o.key_bytes)).status();
    } else if (op == "scan") {
      st = reader.scan(key_of(key, o.key_bytes), scan_length).status();
    } else if (op == "update") {
      st = s.kv->put(key_of(key, o.key_bytes), value);
    } else if (op == "insert") {
      st = s.kv->put(key_of((*inserted)++, o.key_bytes), value);
    } else {
      st = s.kv->read_modify_write(key_of(key, o.key_bytes), [&](std::optional<std::span<const uint8_t>> cur) {
        std::vector<uint8_t> next = cur ? std::vector<uint8_t>(cur->begin(), cur->end()) : value;
        if (!next.empty()) next[0] = static_cast<uint8_t>(next[0] + 1);
        return std::optional<std::vector<uint8_t>>(std::move(next));
      });
    }
    const uint64_t t1 = now_ns();
    if (!st.ok()) return Status(st.code(), s.name + " YCSB-" + workload + " " + op + ": " + st.message());
    r->ops[op].hist.record(t1 - t0);
    ++r->total;
    if (op != "read" && op != "scan") ++r->writes;
  }
  r->seconds = static_cast<double>(now_ns() - start) / 1e9;
  r->replica_cpu_ns = s.client->replica_cpu_ns() - cpu0;
  return ok_status();
}

}  // namespace

Status run_store_bench(const StoreBenchOptions& o, std::ostream& out, std::ostream& log) {
  if (o.records == 0 || o.ops == 0 || o.key_bytes < 8 || o.value_bytes == 0) {
    return invalid_argument("--records, --ops, --value-bytes must be >= 1 and --key-bytes >= 8");
  }
  for (const auto& w : o.workloads) {
    if (w != "A" && w != "B" && w != "D" && w != "E" && w != "F") {
      return invalid_argument("unknown workload '" + w + "' (A, B, D, E, F)");
    }
  }
  for (const auto& l : o.loads) {
    if (l != "quiet" && l != "load") return invalid_argument("unknown load '" + l + "' (quiet, load)");
  }
  const int client_cpu = usable_cpu(o.client_cpu);
  const int replica_cpu = usable_cpu(o.replica_cpu);
  if (client_cpu >= 0) FERRY_RETURN_IF_ERROR(pin_current_thread(client_cpu));
  StoreBenchOptions opts = o;
  opts.replica_cpu = replica_cpu;
  log << fmt::format(
      "ferry bench store: the transactional store (YCSB, {} records, {} B keys, {} B values), {} ops per point; "
      "client thread and every NIC on CPU {}, replica threads and load ({} stress-ng workers) on CPU {}; writes "
      "by the front end (lock, Append, ExecuteAndAdvance, unlock), reads from the tail replica under its read "
      "lock, scans there under read locks on every stripe and the index lock (that replica's CPU emulated on the "
      "client thread)\n",
      o.records, o.key_bytes, o.value_bytes, o.ops, client_cpu, o.load_processes, replica_cpu);
  Placement placement;
  placement.client_cpu = client_cpu;
  placement.engine_cpu = client_cpu;
  placement.engine_pinned = client_cpu >= 0;
  // Each system's p99 of YCSB-A updates under load, for the ratios.
  std::map<std::string, double> a_update_p99;
  for (const auto& system : o.systems) {
    log << fmt::format("{}:\n", system);
    // Room for D's and E's inserts: every point of them inserts about 5 % of its ops.
    FERRY_ASSIGN_OR_RETURN(auto s, start_store(system, opts, o.records + o.ops * o.loads.size(), log));
    uint64_t inserted = o.records;
    for (const auto& wl : o.workloads) {
      for (const auto& load_name : o.loads) {
        std::unique_ptr<CpuLoad> load;
        if (load_name == "load") {
          FERRY_ASSIGN_OR_RETURN(load, CpuLoad::start(replica_cpu, static_cast<int>(o.load_processes),
                                                      o.max_seconds * 2 + 30));
        }
        PointResult r;
        FERRY_RETURN_IF_ERROR(run_point(*s, wl[0], opts, &inserted, &r));
        const std::string load_text = load ? load->description() : "none";
        load.reset();
        for (const auto& [op, st] : r.ops) {
          nlohmann::json j;
          j["experiment"] = "ycsb";
          j["system"] = system;
          j["workload"] = wl;
          j["op"] = op;
          j["load"] = load_name;
          j["records"] = o.records;
          j["samples"] = st.hist.count();
          j["p50_us"] = percentile_json(st.hist, 0.50, 1e-3);
          j["p95_us"] = percentile_json(st.hist, 0.95, 1e-3);
          j["p99_us"] = percentile_json(st.hist, 0.99, 1e-3);
          j["p999_us"] = percentile_json(st.hist, 0.999, 1e-3);
          j["max_us"] = static_cast<double>(st.hist.max()) / 1e3;
          j["mops"] = static_cast<double>(r.total) / r.seconds / 1e6;
          j["replica_cpu_ns_per_op"] =
              r.writes > 0 ? nlohmann::json(static_cast<double>(r.replica_cpu_ns) / static_cast<double>(r.writes))
                           : nlohmann::json(nullptr);
          j["capped"] = r.capped;
          j["key_bytes"] = o.key_bytes;
          j["value_bytes"] = o.value_bytes;
          j["reads_from"] = "tail replica, read lock";
          if (op == "scan") {
            j["reads_from"] = "tail replica, read locks on every stripe and the index lock";
            j["scan_length"] = fmt::format("uniform 1..{}", kScanLengthMax);
          }
          Placement p = placement;
          p.load = load_text;
          j["placement"] = placement_json(p);
          add_provenance(j);
          if (wl == "A" && op == "update" && load_name == "load" && percentile_reportable(st.hist, 0.99)) {
            a_update_p99[system] = static_cast<double>(st.hist.percentile(0.99)) / 1e3;
          }
          if (o.json) {
            out << j.dump() << "\n";
          } else {
            out << fmt::format("{:<12} YCSB-{} {:<6} {:<5} samples {:>6}  p50 {:>9} us  p99 {:>9} us  p99.9 {:>9} us  "
                               "max {:>9.1f} us  {:.4f} Mops  replica CPU/write {}\n",
                               system, wl, op, load_name, st.hist.count(), percentile_text(st.hist, 0.5, 1e-3, 1),
                               percentile_text(st.hist, 0.99, 1e-3, 1), percentile_text(st.hist, 0.999, 1e-3, 1),
                               static_cast<double>(st.hist.max()) / 1e3, static_cast<double>(r.total) / r.seconds / 1e6,
                               r.writes > 0 ? fmt::format("{:.0f} ns", static_cast<double>(r.replica_cpu_ns) /
                                                                           static_cast<double>(r.writes))
                                            : std::string("-"));
          }
        }
      }
    }
  }
  if (a_update_p99.count("hyperloop") != 0) {
    nlohmann::json j;
    j["experiment"] = "summary";
    j["ycsb_a_update_p99_us_under_load"] = a_update_p99;
    for (const auto& base : {"naive-event", "naive-poll"}) {
      if (a_update_p99.count(base) != 0) {
        j[std::string("p99_ratio_") + base + "_over_hyperloop"] = a_update_p99[base] / a_update_p99["hyperloop"];
      }
    }
    j["redis"] = "not in this bench yet";
    if (o.json) {
      out << j.dump() << "\n";
    } else {
      out << "summary: " << j.dump() << "\n";
    }
  }
  return ok_status();
}

}  // namespace ferry::bench
