// The cache and PmKv engines behind the RPC layer: handlers per worker
// partition, and the client-side encoding.
#include "ferry/store/kv_service.h"

#include <cstring>
#include <string>

#include "ferry/common/checksum.h"

namespace ferry::store {

namespace {

struct Parsed {
  KvHeader h;
  std::string_view key;
  std::string_view value;
};

// The payload of a request, from the network: false if it does not parse.
bool parse_kv(std::span<const uint8_t> p, Parsed* out) {
  if (p.size() < sizeof(KvHeader)) return false;
  std::memcpy(&out->h, p.data(), sizeof(KvHeader));
  if (out->h.reserved != 0 || sizeof(KvHeader) + out->h.key_bytes > p.size()) return false;
  const char* base = reinterpret_cast<const char*>(p.data());
  out->key = std::string_view(base + sizeof(KvHeader), out->h.key_bytes);
  out->value = std::string_view(base + sizeof(KvHeader) + out->h.key_bytes, p.size() - sizeof(KvHeader) - out->h.key_bytes);
  return true;
}

void reply_status(rpc::Reply& r, CacheStatus s) { r.set_status(static_cast<uint8_t>(s)); }

bool nilext_type(KvRequestType t) {
  return t == kCacheSet || t == kCacheDeleteQuiet || t == kPmPut || t == kPmRemove;
}

}  // namespace

uint64_t key_route(std::string_view key) {
  return checksum64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size()));
}

size_t encode_kv(std::span<uint8_t> out, std::string_view key, std::string_view value, uint32_t flags,
                 int64_t exptime, uint64_t arg) {
  const size_t n = sizeof(KvHeader) + key.size() + value.size();
  if (n > out.size() || key.size() > UINT16_MAX) return 0;
  KvHeader h{};
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.flags = flags;
  h.exptime = exptime;
  h.arg = arg;
  std::memcpy(out.data(), &h, sizeof(h));
  if (!key.empty()) std::memcpy(out.data() + sizeof(h), key.data(), key.size());
  if (!value.empty()) std::memcpy(out.data() + sizeof(h) + key.size(), value.data(), value.size());
  return n;
}

bool parse_cache_value(std::span<const uint8_t> reply, CacheValue* out) {
  if (reply.size() < 12) return false;
  std::memcpy(&out->flags, reply.data(), 4);
  std::memcpy(&out->cas, reply.data() + 4, 8);
  out->value = std::string_view(reinterpret_cast<const char*>(reply.data() + 12), reply.size() - 12);
  return true;
}

// ---- cache service ----

Result<std::unique_ptr<CacheService>> CacheService::attach(rpc::Server& server, const Clock& clock,
                                                           const CacheOptions& per_worker) {
  std::unique_ptr<CacheService> svc(new CacheService());
  for (uint32_t w = 0; w < server.workers(); ++w) svc->caches_.push_back(std::make_unique<Cache>(clock, per_worker));
  CacheService* s = svc.get();
  // The commands that store a value: the same payload, one engine call.
  auto store = [s](CacheStatus (*op)(Cache&, const Parsed&)) {
    return [s, op](const rpc::Request& r, rpc::Reply& out) {
      Parsed p;
      if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
      reply_status(out, op(*s->caches_[r.worker], p));
    };
  };
  struct Reg {
    KvRequestType type;
    const char* name;
    rpc::Handler handler;
  };
  std::vector<Reg> regs;
  regs.push_back({kCacheSet, "cache-set", store([](Cache& c, const Parsed& p) {
                    return c.set(p.key, p.value, p.h.flags, p.h.exptime);
                  })});
  regs.push_back({kCacheAdd, "cache-add", store([](Cache& c, const Parsed& p) {
                    return c.add(p.key, p.value, p.h.flags, p.h.exptime);
                  })});
  regs.push_back({kCacheReplace, "cache-replace", store([](Cache& c, const Parsed& p) {
                    return c.replace(p.key, p.value, p.h.flags, p.h.exptime);
                  })});
  regs.push_back({kCacheAppend, "cache-append", store([](Cache& c, const Parsed& p) { return c.append(p.key, p.value); })});
  regs.push_back({kCachePrepend, "cache-prepend", store([](Cache& c, const Parsed& p) { return c.prepend(p.key, p.value); })});
  regs.push_back({kCacheCas, "cache-cas", store([](Cache& c, const Parsed& p) {
                    return c.cas(p.key, p.value, p.h.flags, p.h.exptime, p.h.arg);
                  })});
  regs.push_back({kCacheDelete, "cache-delete", store([](Cache& c, const Parsed& p) { return c.remove(p.key); })});
  regs.push_back({kCacheDeleteQuiet, "cache-delete-quiet", store([](Cache& c, const Parsed& p) { return c.remove(p.key); })});
  regs.push_back({kCacheTouch, "cache-touch", store([](Cache& c, const Parsed& p) { return c.touch(p.key, p.h.exptime); })});
  auto getter = [s](bool with_cas) {
    return [s, with_cas](const rpc::Request& r, rpc::Reply& out) {
      Parsed p;
      if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
      Cache& c = *s->caches_[r.worker];
      const CacheGetResult g = with_cas ? c.gets(p.key) : c.get(p.key);
      reply_status(out, g.status);
      if (g.status != CacheStatus::kOk) return;
      uint8_t head[12];
      std::memcpy(head, &g.flags, 4);
      std::memcpy(head + 4, &g.cas, 8);
      out.append(head);
      out.append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(g.value.data()), g.value.size()));
    };
  };
  regs.push_back({kCacheGet, "cache-get", getter(false)});
  regs.push_back({kCacheGets, "cache-gets", getter(true)});
  auto arith = [s](bool increment) {
    return [s, increment](const rpc::Request& r, rpc::Reply& out) {
      Parsed p;
      if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
      Cache& c = *s->caches_[r.worker];
      const CacheArithResult a = increment ? c.incr(p.key, p.h.arg) : c.decr(p.key, p.h.arg);
      reply_status(out, a.status);
      if (a.status == CacheStatus::kOk) {
        out.append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&a.value), sizeof(a.value)));
      }
    };
  };
  regs.push_back({kCacheIncr, "cache-incr", arith(true)});
  regs.push_back({kCacheDecr, "cache-decr", arith(false)});
  for (Reg& r : regs) {
    // The nilext ones (set, quiet delete) are blind writes: re-running any
    // suffix of them leaves what one run leaves.
    const bool nilext = nilext_type(r.type);
    Status st = server.register_handler(r.type, rpc::HandlerInfo{r.name, nilext, /*replay_safe=*/nilext},
                                        std::move(r.handler));
    if (!st.ok()) return st;
  }
  return svc;
}

// ---- PmKv service ----

Result<std::unique_ptr<PmKvService>> PmKvService::attach(rpc::Server& server, pm::PersistenceDomain& domain,
                                                         std::span<pm::Region* const> regions, bool open_existing,
                                                         const PmKvOptions& options) {
  if (regions.size() != server.workers()) {
    return invalid_argument("PmKvService: one region per server worker (" + std::to_string(server.workers()) + ")");
  }
  std::unique_ptr<PmKvService> svc(new PmKvService());
  for (pm::Region* region : regions) {
    auto kv = open_existing ? PmKv::open(domain, *region, options) : PmKv::create(domain, *region, options);
    if (!kv.ok()) return kv.status();
    svc->stores_.push_back(std::move(kv.value()));
  }
  PmKvService* s = svc.get();
  const rpc::ServerOptions& so = server.options();
  s->stride_bytes_ = so.stride_bytes;
  s->strides_ = so.buffer_bytes / so.stride_bytes;
  s->reservation_bytes_ = reservation_bytes(so);
  // A put committed by the NIC must find room (JUNE BERRY: nilext requests
  // cannot fail by state): every receive buffer gets its room in the store
  // before it is posted.
  rpc::Admission admission;
  admission.reserve = [s](uint32_t w, uint64_t) -> Result<uint64_t> {
    FERRY_ASSIGN_OR_RETURN(PmKvReservation r, s->stores_[w]->reserve(s->reservation_bytes_));
    return r.offset;  // the token: never 0 (the superblock is at 0)
  };
  admission.restore = [s](uint32_t w, uint64_t, uint64_t token) {
    return s->stores_[w]->adopt(PmKvReservation{token, s->reservation_bytes_});
  };
  admission.release = [s](uint32_t w, uint64_t, uint64_t token) {
    s->stores_[w]->release(PmKvReservation{token, s->reservation_bytes_});
  };
  FERRY_RETURN_IF_ERROR(server.set_admission(std::move(admission)));
  Status st = server.register_handler(kPmPut, {"pm-put", true, /*replay_safe=*/true}, [s](const rpc::Request& r, rpc::Reply& out) {
    Parsed p;
    if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
    PmKv& kv = *s->stores_[r.worker];
    Status put;
    if (r.admission_token != 0) {
      // Its own spot in the buffer's room: where its request lay in the buffer.
      const uint64_t at = (r.position % s->strides_) * s->stride_bytes_;
      const uint64_t request = rpc::kRequestHeaderBytes + r.payload.size();
      const uint64_t room = (request + s->stride_bytes_ - 1) / s->stride_bytes_ * s->stride_bytes_;
      put = kv.put_reserved(p.key, p.value, PmKvReservation{r.admission_token, s->reservation_bytes_}, at, room);
    } else {
      put = kv.put(p.key, p.value);
    }
    out.set_status(put.ok() ? kPmOk : kPmError);
  });
  if (!st.ok()) return st;
  st = server.register_handler(kPmRemove, {"pm-remove", true, /*replay_safe=*/true}, [s](const rpc::Request& r, rpc::Reply& out) {
    Parsed p;
    if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
    const Status rs = s->stores_[r.worker]->remove(p.key);
    out.set_status(rs.ok() || rs.code() == Code::kNotFound ? kPmOk : kPmError);
  });
  if (!st.ok()) return st;
  st = server.register_handler(kPmGet, {"pm-get", false}, [s](const rpc::Request& r, rpc::Reply& out) {
    Parsed p;
    if (!parse_kv(r.payload, &p)) return out.set_status(kKvMalformed);
    auto n = s->stores_[r.worker]->get_into(p.key, out.space());
    if (!n.ok()) return out.set_status(n.status().code() == Code::kNotFound ? kPmNotFound : kPmError);
    out.set_size(n.value());
    out.set_status(kPmOk);
  });
  if (!st.ok()) return st;
  return svc;
}

// ---- client ----

KvClient::KvClient(rpc::Session& session, const CacheOptions& item_limits)
    : session_(session), limits_(item_limits), scratch_(1 << 20) {}

Status KvClient::send(KvRequestType type, std::string_view key, std::string_view value, uint32_t flags,
                      int64_t exptime, uint64_t arg, bool nilext, rpc::Callback done) {
  const size_t n = encode_kv(scratch_, key, value, flags, exptime, arg);
  if (n == 0) return invalid_argument("kv: key or value too large for a request");
  return session_.call_async(type, key_route(key), std::span<const uint8_t>(scratch_.data(), n), nilext,
                             std::move(done));
}

Status KvClient::set_async(std::string_view key, std::string_view value, uint32_t flags, int64_t exptime,
                           bool nilext, rpc::Callback done) {
  // A nilext set must not be able to fail at the server: check it here.
  if (nilext) {
    const CacheStatus ok = check_item(limits_, key.size(), value.size());
    if (ok != CacheStatus::kOk) return invalid_argument(std::string("kv: set refused: ") + std::string(cache_status_name(ok)));
  }
  return send(kCacheSet, key, value, flags, exptime, 0, nilext, std::move(done));
}

Status KvClient::get_async(std::string_view key, rpc::Callback done) {
  return send(kCacheGet, key, {}, 0, 0, 0, false, std::move(done));
}

Status KvClient::request_async(KvRequestType type, std::string_view key, std::string_view value, uint32_t flags,
                               int64_t exptime, uint64_t arg, rpc::Callback done) {
  if (type == kCacheSet) return set_async(key, value, flags, exptime, true, std::move(done));
  return send(type, key, value, flags, exptime, arg, nilext_type(type), std::move(done));
}

Result<rpc::CallReply> KvClient::request(KvRequestType type, std::string_view key, std::string_view value,
                                         uint32_t flags, int64_t exptime, uint64_t arg) {
  if (type == kCacheSet) {
    const CacheStatus ok = check_item(limits_, key.size(), value.size());
    if (ok != CacheStatus::kOk) return invalid_argument(std::string("kv: set refused: ") + std::string(cache_status_name(ok)));
  }
  const size_t n = encode_kv(scratch_, key, value, flags, exptime, arg);
  if (n == 0) return invalid_argument("kv: key or value too large for a request");
  return session_.call(type, key_route(key), std::span<const uint8_t>(scratch_.data(), n), nilext_type(type));
}

uint64_t PmKvService::reservation_bytes(const rpc::ServerOptions& options) {
  const uint32_t buffer_bytes = options.multi_packet ? options.buffer_bytes : (options.max_request_bytes + 63) / 64 * 64;
  return (buffer_bytes + 255) / 256 * 256;
}

Status KvClient::pm_put_async(std::string_view key, std::string_view value, bool nilext, rpc::Callback done) {
  // A nilext put must not fail at the server: what its input alone decides
  // is checked here (room is the server's admission).
  if (nilext && (key.size() > kPmKvMaxKeyBytes || value.size() > kPmKvMaxValueBytes)) {
    return invalid_argument("kv: put refused: key or value over PmKv's limits (" + std::to_string(kPmKvMaxKeyBytes) +
                            ", " + std::to_string(kPmKvMaxValueBytes) + " bytes)");
  }
  return send(kPmPut, key, value, 0, 0, 0, nilext, std::move(done));
}

Status KvClient::pm_get_async(std::string_view key, rpc::Callback done) {
  return send(kPmGet, key, {}, 0, 0, 0, false, std::move(done));
}

}  // namespace ferry::store
