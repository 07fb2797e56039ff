// Encoding and decoding of the CM's frames (docs/connection-manager.md,
// "Wire format"). All integers are big-endian.
#include "ferry/cm/message.h"

#include <algorithm>
#include <string>

namespace ferry::cm {

namespace {

constexpr uint32_t kMask24 = 0xFFFFFF;

bool valid_mtu(uint32_t mtu) { return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096; }

bool valid_reason(uint8_t r) {
  return r >= static_cast<uint8_t>(RejectReason::kUnknownService) &&
         r <= static_cast<uint8_t>(RejectReason::kLocalError);
}

// A REJ's code must be an error a caller could receive from a local call.
bool valid_reject_code(uint8_t c) {
  return c > static_cast<uint8_t>(Code::kOk) && c <= static_cast<uint8_t>(Code::kUnimplemented);
}

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v >> 8));
    u8(static_cast<uint8_t>(v));
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v >> 16));
    u16(static_cast<uint16_t>(v));
  }
  void bytes(std::span<const uint8_t> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }

 private:
  std::vector<uint8_t>* out_;
};

// Reads inside `in` only; the first short read fails the Reader for good
// and later reads return zeros, so a decoder checks ok() once per step.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size() - pos_; }
  uint8_t u8() { return take(1) ? in_[pos_ - 1] : 0; }
  uint16_t u16() {
    if (!take(2)) return 0;
    return static_cast<uint16_t>(in_[pos_ - 2] << 8 | in_[pos_ - 1]);
  }
  uint32_t u32() {
    if (!take(4)) return 0;
    const uint8_t* p = &in_[pos_ - 4];
    return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
           static_cast<uint32_t>(p[2]) << 8 | p[3];
  }
  std::span<const uint8_t> bytes(size_t n) {
    if (!take(n)) return {};
    return in_.subspan(pos_ - n, n);
  }

 private:
  bool take(size_t n) {
    if (!ok_ || n > remaining()) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

Status malformed(std::string_view what) { return invalid_argument("malformed CM message: " + std::string(what)); }

void write_endpoint(Writer& w, const QpEndpoint& e) {
  w.bytes(e.gid.raw);
  w.u16(e.udp_port);
  w.u32(e.qp_num);
  w.u32(e.first_psn);
  w.u32(e.path_mtu);
  w.u32(static_cast<uint32_t>(e.fabric_id >> 32));
  w.u32(static_cast<uint32_t>(e.fabric_id));
}

Status check_endpoint(const QpEndpoint& e) {
  if (e.qp_num == 0 || e.qp_num > kMask24) {
    return malformed("QP number " + std::to_string(e.qp_num) + " is not a 24-bit QP number");
  }
  if (e.first_psn > kMask24) return malformed("first PSN " + std::to_string(e.first_psn) + " exceeds 24 bits");
  if (!valid_mtu(e.path_mtu)) return malformed("path MTU " + std::to_string(e.path_mtu) + " is not 256..4096");
  return ok_status();
}

Result<QpEndpoint> read_endpoint(Reader& r) {
  QpEndpoint e;
  const std::span<const uint8_t> gid = r.bytes(e.gid.raw.size());
  e.udp_port = r.u16();
  e.qp_num = r.u32();
  e.first_psn = r.u32();
  e.path_mtu = r.u32();
  e.fabric_id = static_cast<uint64_t>(r.u32()) << 32;
  e.fabric_id |= r.u32();
  if (!r.ok()) return malformed("truncated QP endpoint");
  std::copy(gid.begin(), gid.end(), e.gid.raw.begin());
  FERRY_RETURN_IF_ERROR(check_endpoint(e));
  return e;
}

Status check_private_data(std::span<const uint8_t> data) {
  if (data.size() > kMaxPrivateDataBytes) {
    return invalid_argument("private data is " + std::to_string(data.size()) + " bytes, at most " +
                            std::to_string(kMaxPrivateDataBytes) + " allowed");
  }
  return ok_status();
}

Result<std::vector<uint8_t>> read_private_data(Reader& r) {
  const uint16_t len = r.u16();
  if (!r.ok()) return malformed("truncated private data length");
  if (len > kMaxPrivateDataBytes) return malformed("private data length " + std::to_string(len) + " exceeds 4096");
  const std::span<const uint8_t> data = r.bytes(len);
  if (!r.ok()) return malformed("private data shorter than its length " + std::to_string(len));
  return std::vector<uint8_t>(data.begin(), data.end());
}

// A REJ's text is advice for a human: keep it bounded and printable rather
// than refuse to send the REJ.
std::string printable(std::string_view text) {
  std::string s(text.substr(0, kMaxRejectTextBytes));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7F) c = ' ';
  }
  return s;
}

struct Encoder {
  Writer& w;
  Status operator()(const Req& m) {
    if (!valid_service_name(m.service)) {
      return invalid_argument("service name '" + printable(m.service.substr(0, 64)) +
                              "' must be 1..255 printable ASCII characters without spaces");
    }
    FERRY_RETURN_IF_ERROR(check_endpoint(m.endpoint));
    FERRY_RETURN_IF_ERROR(check_private_data(m.private_data));
    w.u8(static_cast<uint8_t>(m.service.size()));
    w.text(m.service);
    write_endpoint(w, m.endpoint);
    w.u16(static_cast<uint16_t>(m.private_data.size()));
    w.bytes(m.private_data);
    return ok_status();
  }
  Status operator()(const Rep& m) {
    FERRY_RETURN_IF_ERROR(check_endpoint(m.endpoint));
    FERRY_RETURN_IF_ERROR(check_private_data(m.private_data));
    write_endpoint(w, m.endpoint);
    w.u16(static_cast<uint16_t>(m.private_data.size()));
    w.bytes(m.private_data);
    return ok_status();
  }
  Status operator()(const Rej& m) {
    if (!valid_reason(static_cast<uint8_t>(m.reason))) return invalid_argument("unknown reject reason");
    if (!valid_reject_code(static_cast<uint8_t>(m.code))) return invalid_argument("a REJ needs an error code");
    const std::string text = printable(m.text);
    w.u8(static_cast<uint8_t>(m.reason));
    w.u8(static_cast<uint8_t>(m.code));
    w.u16(static_cast<uint16_t>(text.size()));
    w.text(text);
    return ok_status();
  }
  Status operator()(const Rtu&) { return ok_status(); }
};

uint8_t type_of(const Message& m) { return static_cast<uint8_t>(m.index() + 1); }

}  // namespace

std::string_view reject_reason_name(RejectReason r) {
  switch (r) {
    case RejectReason::kUnknownService: return "unknown service";
    case RejectReason::kServiceRefused: return "refused by the service";
    case RejectReason::kBadMessage: return "bad message";
    case RejectReason::kUnsupportedVersion: return "unsupported version";
    case RejectReason::kLocalError: return "local error";
  }
  return "unknown reason";
}

std::string_view message_name(const Message& m) {
  static constexpr std::string_view kNames[] = {"REQ", "REP", "REJ", "RTU"};
  return kNames[m.index()];
}

bool valid_service_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxServiceNameBytes) return false;
  for (const char c : name) {
    if (c <= 0x20 || c >= 0x7F) return false;
  }
  return true;
}

Result<std::vector<uint8_t>> encode(const Message& message) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.u32(0);  // the length, patched below
  w.u8(kWireVersion);
  w.u8(type_of(message));
  w.u16(0);  // reserved
  FERRY_RETURN_IF_ERROR(std::visit(Encoder{w}, message));
  const size_t body = out.size() - kFrameHeaderBytes;
  FERRY_ASSERT(body <= kMaxMessageBytes, "a CM message within its field bounds exceeds the frame limit");
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  return out;
}

Result<uint32_t> decode_length(std::span<const uint8_t, kFrameHeaderBytes> header) {
  const uint32_t length = static_cast<uint32_t>(header[0]) << 24 | static_cast<uint32_t>(header[1]) << 16 |
                          static_cast<uint32_t>(header[2]) << 8 | header[3];
  if (length < kMessageHeaderBytes || length > kMaxMessageBytes) {
    return malformed("frame length " + std::to_string(length) + " is outside " +
                     std::to_string(kMessageHeaderBytes) + ".." + std::to_string(kMaxMessageBytes));
  }
  return length;
}

Result<Message> decode(std::span<const uint8_t> body) {
  Reader r(body);
  const uint8_t version = r.u8();
  if (!r.ok()) return malformed("empty body");
  if (version != kWireVersion) {
    return unimplemented("CM wire version " + std::to_string(version) + " is not supported (this side speaks " +
                         std::to_string(kWireVersion) + ")");
  }
  const uint8_t type = r.u8();
  const uint16_t reserved = r.u16();
  if (!r.ok()) return malformed("truncated header");
  if (reserved != 0) return malformed("reserved header field is " + std::to_string(reserved) + ", not 0");

  Message message;
  switch (type) {
    case 1: {
      Req m;
      const uint8_t name_len = r.u8();
      const std::span<const uint8_t> name = r.bytes(name_len);
      if (!r.ok()) return malformed("truncated service name");
      m.service.assign(name.begin(), name.end());
      if (!valid_service_name(m.service)) return malformed("service name is not 1..255 printable characters");
      FERRY_ASSIGN_OR_RETURN(m.endpoint, read_endpoint(r));
      FERRY_ASSIGN_OR_RETURN(m.private_data, read_private_data(r));
      message = std::move(m);
      break;
    }
    case 2: {
      Rep m;
      FERRY_ASSIGN_OR_RETURN(m.endpoint, read_endpoint(r));
      FERRY_ASSIGN_OR_RETURN(m.private_data, read_private_data(r));
      message = std::move(m);
      break;
    }
    case 3: {
      Rej m;
      const uint8_t reason = r.u8();
      const uint8_t code = r.u8();
      const uint16_t text_len = r.u16();
      if (!r.ok()) return malformed("truncated REJ");
      if (!valid_reason(reason)) return malformed("unknown reject reason " + std::to_string(reason));
      if (!valid_reject_code(code)) return malformed("REJ status code " + std::to_string(code) + " is not an error");
      if (text_len > kMaxRejectTextBytes) {
        return malformed("REJ text length " + std::to_string(text_len) + " exceeds 1024");
      }
      const std::span<const uint8_t> text = r.bytes(text_len);
      if (!r.ok()) return malformed("REJ text shorter than its length");
      m.reason = static_cast<RejectReason>(reason);
      m.code = static_cast<Code>(code);
      m.text.assign(text.begin(), text.end());
      // What the encoder sends has none; refusing them keeps the encoding
      // canonical and a peer's text harmless to print.
      if (printable(m.text) != m.text) return malformed("REJ text has control characters");
      message = std::move(m);
      break;
    }
    case 4:
      message = Rtu{};
      break;
    default:
      return malformed("unknown message type " + std::to_string(type));
  }
  if (r.remaining() != 0) {
    return malformed(std::to_string(r.remaining()) + " bytes after the " + std::string(message_name(message)));
  }
  return message;
}

}  // namespace ferry::cm
