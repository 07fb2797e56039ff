#include "oq_setup.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <span>
#include <string_view>

#include "common.h"
#include "ferry/common/align.h"
#include "ferry/common/cpu.h"
#include "ferry/common/temp_dir.h"
#include "ferry/common/tsc.h"

namespace ferry::bench::oq_bench {

rpc::Mode mode_of(const std::string& system) {
  if (system == "rawrpc") return rpc::Mode::kRawRpc;
  if (system == "deferred") return rpc::Mode::kDeferredExec;
  return rpc::Mode::kOrderedQueue;
}

PmHost::~PmHost() {
  domain.reset();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

Result<std::unique_ptr<PmHost>> make_pm_host(const OqBenchOptions& o) {
  auto h = std::make_unique<PmHost>();
  h->domain = std::make_unique<pm::PersistenceDomain>(pm::PlatformConfig{});
  FERRY_ASSIGN_OR_RETURN(h->dir, make_temp_dir(o.pm_dir.empty() ? "/dev/shm" : o.pm_dir, "ferry-oq-bench"));
  const size_t area = rpc::DurableLayout{kMpBuffers, kMpBufferBytes, 64}.area_bytes();
  const size_t srq_bytes = (o.workers * area + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  FERRY_ASSIGN_OR_RETURN(h->srq, h->domain->map_pm(h->dir + "/srq", srq_bytes, true));
  for (uint32_t w = 0; w < o.workers; ++w) {
    FERRY_ASSIGN_OR_RETURN(pm::Region * r,
                           h->domain->map_pm(h->dir + "/data" + std::to_string(w), o.pm_region_bytes, true));
    h->data.push_back(r);
  }
  return h;
}

uint32_t request_bytes(const KvMix& mix) {
  return static_cast<uint32_t>(rpc::kRequestHeaderBytes + sizeof(store::KvHeader)) + mix.key_bytes + mix.value_bytes;
}

Sut::~Sut() {
  kv.clear();
  client.reset();
  server.reset();  // joins the workers before their engines' partitions go
  cache.reset();
  pmkv.reset();
  engine.reset();
}

Result<std::unique_ptr<Sut>> build_sut(const SutConfig& c, const OqBenchOptions& o, PmHost* pm_host) {
  auto s = std::make_unique<Sut>();
  s->config = c;
  const bool durable = c.system == "oq-durable";
  FERRY_ASSERT(!durable || c.backend == Backend::kPmKv, "oq-durable serves PmKv");
  FERRY_ASSERT(c.backend == Backend::kCache || pm_host != nullptr, "PmKv needs the PM host");
  nic::EngineOptions eo;
  eo.threaded = false;  // stepped by the client thread: see oq_bench.h
  s->engine = std::make_unique<nic::Engine>(eo);
  nic::NicOptions sno;
  sno.name = "server";
  if (c.backend == Backend::kPmKv) sno.memory = pm_host->domain.get();  // the PM host's DMA path, DDIO off
  sno.resource_model.qp_context_entries = o.qp_context_entries;
  FERRY_ASSIGN_OR_RETURN(s->server_nic, s->engine->add_nic(sno));
  nic::NicOptions cno;
  cno.name = "client";
  FERRY_ASSIGN_OR_RETURN(s->client_nic, s->engine->add_nic(cno));

  rpc::ServerOptions so;
  so.mode = mode_of(c.system);
  so.workers = o.workers;
  so.multi_packet = c.multi_packet;
  so.max_request_bytes = round_up(request_bytes(c.mix), 256);
  so.max_response_bytes = round_up(c.mix.value_bytes + 128, 256);
  so.stride_bytes = 64;
  so.buffer_bytes = kMpBufferBytes;
  so.buffers = c.multi_packet ? kMpBuffers : kMpBuffers * kMpBufferBytes / so.max_request_bytes;
  so.threaded = true;
  if (o.server_cpu >= 0) so.worker_cpus = {o.server_cpu};
  if (durable) so.durable_region = pm_host->srq;
  s->worker_tids = std::make_shared<std::vector<std::atomic<int>>>(o.workers);
  so.on_execute = [tids = s->worker_tids, ticks = static_cast<uint64_t>(static_cast<double>(c.server_ns_per_request) /
                                                                        Tsc::ns_per_tick())](const rpc::Request& req) {
    std::atomic<int>& tid = (*tids)[req.worker];
    if (tid.load(std::memory_order_relaxed) == 0) tid.store(static_cast<int>(gettid()), std::memory_order_relaxed);
    if (ticks == 0) return;
    const uint64_t until = Tsc::now() + ticks;
    while (Tsc::now() < until) cpu_relax();
  };
  FERRY_ASSIGN_OR_RETURN(s->server, rpc::Server::create(*s->engine, *s->server_nic, so));

  // The engines, prefilled with every key of the mix (so gets hit), before
  // the workers start.
  const workload::KvRequestGenerator gen(c.mix);
  const std::string value(c.mix.value_bytes, 'v');
  std::string key(c.mix.key_bytes, ' ');
  if (c.backend == Backend::kCache) {
    s->cache_options.memory_limit_bytes = 256ull << 20;
    FERRY_ASSIGN_OR_RETURN(s->cache, store::CacheService::attach(*s->server, timing_clock(), s->cache_options));
    for (uint64_t k = 0; k < c.mix.key_space; ++k) {
      gen.write_key(k, std::span<char>(key.data(), key.size()));
      const auto w = static_cast<uint32_t>(store::key_route(key) % o.workers);
      if (s->cache->partition(w).set(key, value, 0, 0) != store::CacheStatus::kStored) {
        return internal_error("prefill: the cache refused key " + std::to_string(k));
      }
    }
  } else {
    store::PmKvOptions po;
    po.bucket_count = std::max<uint64_t>(1024, c.mix.key_space / o.workers);
    FERRY_ASSIGN_OR_RETURN(s->pmkv, store::PmKvService::attach(*s->server, *pm_host->domain, pm_host->data,
                                                               /*open_existing=*/false, po));
    for (uint64_t k = 0; k < c.mix.key_space; ++k) {
      gen.write_key(k, std::span<char>(key.data(), key.size()));
      const auto w = static_cast<uint32_t>(store::key_route(key) % o.workers);
      FERRY_RETURN_IF_ERROR(s->pmkv->partition(w).put(key, value));
    }
  }
  FERRY_RETURN_IF_ERROR(s->server->start());

  rpc::ClientOptions co;
  co.sessions = c.sessions;
  co.delegation = c.delegation;
  co.max_inflight = c.max_inflight;
  co.timeout_ns = 60'000'000'000ULL;
  FERRY_ASSIGN_OR_RETURN(s->client, rpc::Client::create(*s->engine, *s->client_nic, *s->server, co));
  for (uint32_t i = 0; i < c.sessions; ++i) {
    s->kv.push_back(std::make_unique<store::KvClient>(s->client->session(i), s->cache_options));
  }
  return s;
}

KvTarget::KvTarget(Sut& s, Run& run, uint64_t seed)
    : s_(s),
      run_(run),
      sinks_{Sink{&run, Run::kSet}, Sink{&run, Run::kGet}},
      gen_(s.config.mix),
      rng_(seed),
      key_(s.config.mix.key_bytes, ' '),
      value_(s.config.mix.value_bytes, 'x') {}

void KvTarget::Sink::done(uint64_t at_ns, const rpc::CallResult& r) const {
  const uint64_t now = now_ns();
  if (!r.status.ok()) {
    run->rec.failed(r.status.to_string());
    return;
  }
  ++run->commits[static_cast<size_t>(r.commit)];
  run->rec.completed(kind, at_ns, now);
}

Status KvTarget::issue(uint64_t at_ns) {
  const uint32_t sessions = s_.config.sessions;
  for (uint32_t tried = 0; s_.client->session(next_session_).inflight() >= s_.config.max_inflight; ++tried) {
    next_session_ = (next_session_ + 1) % sessions;
    if (tried + 1 == sessions) return Status(Code::kResourceExhausted, {});  // every session is full
  }
  const workload::KvRequest q = gen_.next(rng_);
  gen_.write_key(q.key_number, std::span<char>(key_.data(), key_.size()));
  const std::string_view value(value_.data(), q.value_bytes);
  const bool set = q.op == workload::OpType::kSet;
  const Sink* sink = &sinks_[set ? Run::kSet : Run::kGet];
  rpc::Callback done = [sink, at_ns](const rpc::CallResult& r) { sink->done(at_ns, r); };
  store::KvClient& kv = *s_.kv[next_session_];
  Status st;
  if (s_.config.backend == Backend::kCache) {
    st = set ? kv.set_async(key_, value, 0, 0, /*nilext=*/true, std::move(done)) : kv.get_async(key_, std::move(done));
  } else {
    st = set ? kv.pm_put_async(key_, value, /*nilext=*/true, std::move(done)) : kv.pm_get_async(key_, std::move(done));
  }
  if (!st.ok()) return st;
  run_.rec.issued();
  next_session_ = (next_session_ + 1) % sessions;
  return ok_status();
}

Status KvTarget::step(uint64_t /*until_ns*/) {
  const bool timed = idle_.begin();
  bool busy = s_.engine->step();
  for (uint32_t i = 0; i < s_.config.sessions; ++i) busy |= s_.client->session(i).poll() > 0;
  idle_.end(timed, busy);
  return ok_status();
}

Snapshot KvTarget::snapshot() const {
  Snapshot n;
  n.server_nic = s_.server_nic->counters();
  n.client_nic = s_.client_nic->counters();
  n.workers = s_.server->counters();
  n.process_cpu_ns = process_cpu_time_ns();
  n.client_cpu_ns = thread_cpu_time_ns();
  const pid_t pid = getpid();
  for (const std::atomic<int>& tid : *s_.worker_tids) n.worker_threads += read_schedstat(pid, tid.load());
  n.client_thread = read_schedstat(pid, static_cast<int>(gettid()));
  n.client_idle_ns = idle_.idle_ns();
  return n;
}

void KvTarget::on_window_open(uint64_t /*now_ns*/) { run_.start = snapshot(); }
void KvTarget::on_window_close(uint64_t /*now_ns*/) { run_.end = snapshot(); }

}  // namespace ferry::bench::oq_bench
