#include "tailwind_setup.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "common.h"
#include "ferry/common/tsc.h"
#include "ferry/store/logkv_wire.h"

namespace ferry::bench::tailwind_bench {
namespace {

tailwind::Replication replication_of(const std::string& system) {
  return system == "tailwind" ? tailwind::Replication::kTailwind : tailwind::Replication::kRpc;
}

void on_reply(Recorder& rec, uint64_t at_ns, bool put, const rpc::CallResult& r) {
  const uint64_t now = now_ns();
  if (!r.status.ok() || r.app_status != logkv::kOk) {
    rec.failed(r.status.ok() ? "reply status " + std::to_string(r.app_status) : r.status.to_string());
    return;
  }
  rec.completed(put ? Requests::kPut : Requests::kGet, at_ns, now);
}

// Writes a list of keys, `kInFlight` at a time.
class PrefillTarget {
 public:
  static constexpr uint32_t kInFlight = 128;
  PrefillTarget(Sut& s, Requests& requests, Recorder& rec, const std::vector<uint64_t>& numbers, std::ostream& log,
                const char* what)
      : s_(s), requests_(requests), rec_(rec), numbers_(numbers), log_(log), what_(what) {}
  Status issue(uint64_t /*at_ns*/) {
    if (rec_.outstanding() >= kInFlight) return Status(Code::kResourceExhausted, {});
    FERRY_RETURN_IF_ERROR(requests_.send(rec_, numbers_[next_], /*put=*/true, 0));
    ++next_;
    return ok_status();
  }
  Status step(uint64_t /*until_ns*/) {
    s_.step_and_poll();
    const uint64_t now = now_ns();
    if (now - last_report_ > 2'000'000'000ULL) {
      log_ << fmt::format("  {}: {} of {} objects written ({:.1f} s)\n", what_, next_, numbers_.size(),
                          static_cast<double>(now - start_) / 1e9);
      last_report_ = now;
    }
    return ok_status();
  }

 private:
  Sut& s_;
  Requests& requests_;
  Recorder& rec_;
  const std::vector<uint64_t>& numbers_;
  std::ostream& log_;
  const char* what_;
  size_t next_ = 0;
  uint64_t start_ = now_ns();
  uint64_t last_report_ = start_;
};

}  // namespace

Result<KvMix> mix_of(const std::string& workload, const TailwindBenchOptions& o) {
  if (workload == "ycsb-a" || workload == "ycsb-b" || workload == "ycsb-c") {
    return workload::ycsb_mix(static_cast<char>(std::toupper(workload.back())), o.keys, o.key_bytes, o.value_bytes);
  }
  if (workload == "write-only") {
    FERRY_ASSIGN_OR_RETURN(KvMix m, workload::ycsb_mix('A', o.keys, o.key_bytes, o.value_bytes));
    m.set_fraction = 1.0;
    return m;
  }
  return invalid_argument("unknown workload '" + workload + "' (ycsb-a, ycsb-b, ycsb-c, write-only)");
}

Sut::~Sut() {
  if (engine != nullptr) engine->release_manual_driver();
  rpcs.clear();
  cluster.reset();
}

bool Sut::step_and_poll() {
  const bool timed = idle.begin();
  bool busy = engine->step();
  for (auto& c : rpcs) busy |= c->session(0).poll() > 0;
  idle.end(timed, busy);
  return busy;
}

Result<std::unique_ptr<Sut>> build_sut(const std::string& system, const TailwindBenchOptions& o,
                                       const std::string& dir) {
  auto s = std::make_unique<Sut>();
  s->system = system;
  s->workers = o.workers;
  logkv::ClusterOptions co;
  co.servers = o.servers;
  co.dir = dir;
  co.engine.threaded = false;  // stepped by the client thread: see tailwind_bench.h
  // Four tablets per server: a crashed server's tablets then go to several
  // recovery masters, which restore them in parallel.
  co.tablets_per_table = 4 * o.servers;
  co.server.workers = o.workers;
  co.server.replication = replication_of(system);
  co.server.replicas = o.replicas;
  co.server.segment_bytes = o.segment_bytes;
  // DRAM (battery-backed) buffers: nothing to flush. PM: Tailwind FLUSHes
  // after each WRITE; the RPC baseline's backups persist what they copy.
  const bool pm = o.backup_media == "pm";
  co.server.media = pm ? tailwind::BufferMedia::kPm : tailwind::BufferMedia::kDram;
  co.server.flush = pm;
  co.server.backup_buffers = o.backup_buffers;
  co.server.max_request_bytes = std::max<uint32_t>(1024, o.key_bytes + o.value_bytes + 64);
  if (o.server_cpu >= 0) co.server.worker_cpus = {o.server_cpu};
  FERRY_ASSIGN_OR_RETURN(s->cluster, logkv::Cluster::create(co));
  s->engine = &s->cluster->engine();
  nic::NicOptions no;
  no.name = "bench-client";
  FERRY_ASSIGN_OR_RETURN(s->client_nic, s->engine->add_nic(no));
  for (uint32_t i = 0; i < o.servers; ++i) {
    rpc::ClientOptions rco;
    rco.sessions = 1;
    rco.max_inflight = kSlotsPerServer;
    FERRY_ASSIGN_OR_RETURN(auto c, rpc::Client::create(*s->engine, *s->client_nic, s->cluster->server(i).rpc(), rco));
    s->rpcs.push_back(std::move(c));
  }
  // From here this thread steps the engine while the servers' threads
  // register and deregister segments: their NIC control operations run in
  // its steps, so the NIC's state has one writer.
  s->engine->set_manual_driver();
  FERRY_ASSIGN_OR_RETURN(s->table, s->cluster->create_table("bench"));
  FERRY_ASSIGN_OR_RETURN(s->map, s->cluster->table(s->table));
  return s;
}

Requests::Requests(Sut& s, const KvMix& mix, const std::vector<uint64_t>* keys, uint64_t seed)
    : s_(s),
      keys_(keys),
      rng_(seed),
      gen_(over(mix, keys)),
      names_(mix),
      key_(mix.key_bytes, ' '),
      value_(mix.value_bytes, 'v') {}

Status Requests::issue(Recorder& rec, uint64_t at_ns) {
  const workload::KvRequest q = gen_.next(rng_);
  const uint64_t number = keys_ != nullptr ? (*keys_)[q.key_number] : q.key_number;
  return send(rec, number, q.op == workload::OpType::kSet, at_ns);
}

Status Requests::send(Recorder& rec, uint64_t key_number, bool put, uint64_t at_ns) {
  const std::span<const uint8_t> key = render(key_number);
  const uint64_t hash = logkv::key_hash(s_.table, key);
  const uint32_t server = s_.map.owner_of(hash);
  const std::span<const uint8_t> value(reinterpret_cast<const uint8_t*>(value_.data()), put ? value_.size() : 0);
  const std::vector<uint8_t> payload = logkv::encode_request(s_.table, key, value, std::nullopt);
  Recorder* r = &rec;
  Status st = s_.rpcs[server]->session(0).call_async(
      put ? logkv::kLogKvPut : logkv::kLogKvGet, hash % s_.workers, payload, /*nilext=*/false,
      [r, at_ns, put](const rpc::CallResult& result) { on_reply(*r, at_ns, put, result); });
  if (st.ok()) rec.issued();
  return st;
}

uint32_t Requests::owner(uint64_t key_number) { return s_.map.owner_of(logkv::key_hash(s_.table, render(key_number))); }

KvMix Requests::over(KvMix mix, const std::vector<uint64_t>* keys) {
  if (keys != nullptr) mix.key_space = keys->size();
  return mix;
}

std::span<const uint8_t> Requests::render(uint64_t key_number) {
  names_.write_key(key_number, std::span<char>(key_.data(), key_.size()));
  return {reinterpret_cast<const uint8_t*>(key_.data()), key_.size()};
}

Status LogKvTarget::issue(uint64_t at_ns) {
  if (run_.rec.outstanding() >= limit_) return Status(Code::kResourceExhausted, {});
  return requests_.issue(run_.rec, at_ns);
}

Status LogKvTarget::step(uint64_t /*until_ns*/) {
  s_.step_and_poll();
  return ok_status();
}

tailwind::BackupCounters backup_counters(Sut& s, uint32_t server) {
  // The backup's mutex may be held by a worker whose memory
  // (de)registration waits for this thread's next step: keep stepping.
  std::optional<tailwind::BackupCounters> b;
  while (!(b = s.cluster->server(server).backup().try_counters())) s.engine->step();
  return *b;
}

namespace {

Snapshot snapshot(Sut& s) {
  Snapshot n;
  for (uint32_t i = 0; i < s.cluster->servers(); ++i) {
    logkv::Server& srv = s.cluster->server(i);
    rpc::WorkerCounters c;
    for (uint32_t w = 0; w < s.workers; ++w) c += srv.rpc().counters(w);
    n.client_workers.push_back(c);
    n.backup_worker.push_back(srv.rpc().counters(s.workers));
    n.backups.push_back(backup_counters(s, i));
  }
  n.client_cpu_ns = thread_cpu_time_ns();
  const int self = static_cast<int>(gettid());
  n.client_thread = read_schedstat(getpid(), self);
  n.server_threads = read_schedstat_except(getpid(), self);
  n.client_idle_ns = s.idle.idle_ns();
  return n;
}

}  // namespace

void LogKvTarget::on_window_open(uint64_t /*now_ns*/) { run_.start = snapshot(s_); }
void LogKvTarget::on_window_close(uint64_t /*now_ns*/) { run_.end = snapshot(s_); }

Status prefill(Sut& s, Requests& requests, const std::vector<uint64_t>& numbers, std::ostream& log, const char* what) {
  Recorder rec(2);
  PrefillTarget target(s, requests, rec, numbers, log, what);
  const Result<LoopOutcome> out = run_closed(target, rec, LoopPlan::counted(0, numbers.size()), timing_clock());
  if (!out.ok()) return Status(out.status().code(), std::string(what) + ": " + out.status().message());
  return ok_status();
}

}  // namespace ferry::bench::tailwind_bench
