// The NIC daemon's control protocol (internal header; docs/nicd.md).
//
// One request or response per SOCK_SEQPACKET message on the daemon's Unix
// socket, at most kMaxMessageBytes, in host byte order (both ends are on
// one host): a Header, then the operation's fields, each a fixed-width
// integer or a length-prefixed string. File descriptors travel beside a
// message as SCM_RIGHTS. A response carries the request's op with
// kResponseBit set, its seq, a status code and message, then its fields.
//
// The daemon trusts nothing in a request: every field is bounds-checked by
// the Reader, every handle is checked to be the sender's.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/common/status.h"
#include "ferry/nic/types.h"

namespace ferry::nicd::proto {

constexpr uint32_t kMagic = 0x4443'4e46;  // "FNCD"
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxMessageBytes = 4096;
constexpr uint16_t kResponseBit = 0x8000;

enum class Op : uint16_t {
  kHello = 1,          // u32 version, str client name -> NIC identity, arena; fds: arena, device page, wake eventfd
  kArenaMapped,        // u64 client address of the arena mapping
  kAddMemory,          // u64 client address, u64 length, u64 file offset; fd -> u32 segment
  kRemoveMemory,       // u32 segment
  kAllocPd,            // -> u32 pd
  kDeallocPd,          // u32 pd
  kRegMr,              // u32 pd, u64 address, u64 length, u32 access -> u32 key
  kDeregMr,            // u32 key
  kCreateChannel,      // -> u32 handle, u64 record offset; fd: eventfd
  kDestroyChannel,     // u32 handle
  kCreateCq,           // u32 cqe, u32 count_only, u32 channel (0: none) -> CQ layout
  kDestroyCq,          // u32 number
  kCreateSrq,          // SRQ attributes, ring span -> SRQ layout
  kDestroySrq,         // u32 number
  kCreateQp,           // QP attributes, ring spans -> QP layout
  kDestroyQp,          // u32 qpn
  kModifyQp,           // u32 qpn, u32 mask, QpAttr
  kQueryQp,            // u32 qpn -> QpAttr
  kQpTraffic,          // u32 qpn -> QpTraffic
  kPollAsyncEvent,     // -> u32 present, u32 type, u32 number (this client's objects only)
  kCounters,           // -> NicCounters, UdpCounters
  kResolve,            // u32 ipv4, u32 port -> u32 address
  kEnd,
};
std::string_view op_name(Op op);

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t op = 0;
  uint32_t seq = 0;
  uint32_t body_bytes = 0;
};
static_assert(sizeof(Header) == 16);

class Writer {
 public:
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Bounds-checked reading: after any read past the end, ok() is false and
// every value read is 0.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  std::string str(size_t max_bytes) {
    const uint32_t len = u32();
    if (!ok_ || len > max_bytes || len > n_ - off_) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_ + off_), len);
    off_ += len;
    return s;
  }
  void raw_into(void* dst, size_t bytes) {
    if (!ok_ || bytes > n_ - off_) {
      ok_ = false;
      std::memset(dst, 0, bytes);
      return;
    }
    std::memcpy(dst, p_ + off_, bytes);
    off_ += bytes;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return off_ == n_; }
  size_t offset() const { return off_; }

 private:
  template <typename T>
  T get() {
    T v{};
    if (!ok_ || sizeof(T) > n_ - off_) {
      ok_ = false;
      return T{};
    }
    std::memcpy(&v, p_ + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }
  const uint8_t* p_;
  size_t n_;
  size_t off_ = 0;
  bool ok_ = true;
};

// QpAttr as 13 u32 fields (MODIFY_QP's request, QUERY_QP's reply). A state
// beyond kError decodes as kError.
void put_qp_attr(Writer& w, const nic::QpAttr& a);
nic::QpAttr get_qp_attr(Reader& r);

// A whole message: header and body. Checks magic, version and the body
// length against the bytes received; false if anything is off.
bool parse_header(const uint8_t* p, size_t n, Header* h);
std::vector<uint8_t> frame(uint16_t op, uint32_t seq, const Writer& body);
// A response body starts with the status.
void put_status(Writer& w, const Status& s);
Status get_status(Reader& r);

// Sends one message with up to `nfds` descriptors; receives one, with up to
// `max_fds` descriptors (extra ones are closed). Return false on EOF or error.
bool send_message(int sock, const std::vector<uint8_t>& bytes, const int* fds, size_t nfds);
// Returns bytes received (0 on EOF, -1 on error); *nfds_out descriptors.
ssize_t recv_message(int sock, uint8_t* buf, size_t cap, int* fds, size_t max_fds, size_t* nfds_out);

}  // namespace ferry::nicd::proto
