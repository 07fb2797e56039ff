// RoCEv2-over-UDP framing, ICRC, path MTU and receive validation (udp.h).
#include <ifaddrs.h>
#include <isa-l/crc.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "ferry/nic/udp.h"

namespace ferry::nic::udp {

namespace {
constexpr size_t kMaskedLrhBytes = 8;
constexpr size_t kPseudoBytes = kMaskedLrhBytes + kIpv4HeaderBytes + kUdpHeaderBytes + wire::kBthBytes;
constexpr uint8_t kIpProtoUdp = 17;
constexpr uint16_t kIpFlagDontFragment = 0x4000;

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, static_cast<uint16_t>(v >> 16));
  put16(p + 2, static_cast<uint16_t>(v));
}
}  // namespace

Result<uint32_t> path_mtu_for_interface(uint32_t interface_mtu) {
  if (interface_mtu < kPathOverheadBytes + 256) {
    return invalid_argument("interface MTU " + std::to_string(interface_mtu) + " cannot carry a 256-byte path MTU (" +
                            std::to_string(kPathOverheadBytes) + " bytes of IPv4, UDP, transport headers and ICRC)");
  }
  const uint32_t room = interface_mtu - kPathOverheadBytes;
  uint32_t mtu = 4096;
  while (mtu > room) mtu >>= 1;
  return mtu;
}

Result<uint32_t> interface_mtu(uint32_t ipv4, std::string* name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return unavailable(std::string("getifaddrs: ") + std::strerror(errno));
  std::string found, loopback;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t addr = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if (addr == ipv4) {
      found = i->ifa_name;
      break;
    }
    // Linux answers for every address of a loopback interface's network
    // (all of 127.0.0.0/8 on lo): several daemons on one host can each
    // have an address of their own there, on the RoCE port.
    if ((i->ifa_flags & IFF_LOOPBACK) != 0 && i->ifa_netmask != nullptr && loopback.empty()) {
      const uint32_t mask = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
      if ((addr & mask) == (ipv4 & mask)) loopback = i->ifa_name;
    }
  }
  freeifaddrs(list);
  if (found.empty()) found = loopback;
  if (found.empty()) return not_found("no local interface holds " + UdpEndpoint{ipv4, 0}.to_string());
  if (found.size() >= IFNAMSIZ) return internal_error("interface name too long: " + found);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable(std::string("socket: ") + std::strerror(errno));
  ifreq req{};
  std::memcpy(req.ifr_name, found.c_str(), found.size() + 1);
  const int rc = ioctl(fd, SIOCGIFMTU, &req);
  const int err = errno;
  close(fd);
  if (rc != 0) return unavailable("SIOCGIFMTU on " + found + ": " + std::strerror(err));
  if (name != nullptr) *name = found;
  return static_cast<uint32_t>(req.ifr_mtu);
}

uint32_t crc32(uint32_t crc, std::span<const uint8_t> bytes) {
  return crc32_gzip_refl(crc, bytes.data(), bytes.size());
}

uint32_t icrc(const UdpEndpoint& src, const UdpEndpoint& dst, std::span<const uint8_t> udp_payload,
              uint16_t ip_identification) {
  FERRY_ASSERT(udp_payload.size() >= wire::kBthBytes, "ICRC of a datagram without a BTH");
  // The masked pseudo-header: everything of IPv4/UDP that routers may change
  // is set to ones, so the CRC survives the path (IBTA Annex A17.8).
  uint8_t pseudo[kPseudoBytes];
  uint8_t* p = pseudo;
  std::memset(p, 0xFF, kMaskedLrhBytes);
  p += kMaskedLrhBytes;
  const size_t udp_length = kUdpHeaderBytes + udp_payload.size() + kIcrcBytes;
  p[0] = 0x45;  // version 4, IHL 5
  p[1] = 0xFF;  // TOS (DSCP, ECN): masked
  put16(p + 2, static_cast<uint16_t>(kIpv4HeaderBytes + udp_length));
  put16(p + 4, ip_identification);
  put16(p + 6, kIpFlagDontFragment);
  p[8] = 0xFF;      // TTL: masked
  p[9] = kIpProtoUdp;
  put16(p + 10, 0xFFFF);  // header checksum: masked
  put32(p + 12, src.ipv4);
  put32(p + 16, dst.ipv4);
  p += kIpv4HeaderBytes;
  put16(p, src.port);
  put16(p + 2, dst.port);
  put16(p + 4, static_cast<uint16_t>(udp_length));
  put16(p + 6, 0xFFFF);  // UDP checksum: masked
  p += kUdpHeaderBytes;
  std::memcpy(p, udp_payload.data(), wire::kBthBytes);
  p[4] = 0xFF;  // FECN, BECN, Resv6: masked
  uint32_t crc = crc32(0, pseudo);
  return crc32(crc, udp_payload.subspan(wire::kBthBytes));
}

size_t frame_datagram(std::span<const uint8_t> headers, std::span<const uint8_t> payload, const UdpEndpoint& src,
                      const UdpEndpoint& dst, std::span<uint8_t> out) {
  const uint8_t pad = wire::pad_for(payload.size());
  const size_t body = headers.size() + payload.size() + pad;
  if (headers.size() < wire::kBthBytes || out.size() < body + kIcrcBytes) return 0;
  uint8_t* p = out.data();
  std::memcpy(p, headers.data(), headers.size());
  p[1] = static_cast<uint8_t>((p[1] & ~0x30) | (pad << 4));
  if (!payload.empty()) std::memcpy(p + headers.size(), payload.data(), payload.size());
  std::memset(p + headers.size() + payload.size(), 0, pad);
  const uint32_t crc = icrc(src, dst, out.first(body));
  for (size_t i = 0; i < kIcrcBytes; ++i) p[body + i] = static_cast<uint8_t>(crc >> (8 * i));
  return body + kIcrcBytes;
}

std::string_view rx_verdict_name(RxVerdict v) {
  switch (v) {
    case RxVerdict::kOk: return "ok";
    case RxVerdict::kMalformed: return "malformed";
    case RxVerdict::kBadIcrc: return "bad_icrc";
  }
  return "?";
}

RxVerdict parse_datagram(std::span<const uint8_t> datagram, const UdpEndpoint& src, const UdpEndpoint& dst,
                         ParsedDatagram* out) {
  if (datagram.size() < kMinDatagramBytes || datagram.size() > kMaxDatagramBytes) return RxVerdict::kMalformed;
  const size_t body = datagram.size() - kIcrcBytes;
  const uint8_t* c = datagram.data() + body;
  const uint32_t carried = static_cast<uint32_t>(c[0]) | static_cast<uint32_t>(c[1]) << 8 |
                           static_cast<uint32_t>(c[2]) << 16 | static_cast<uint32_t>(c[3]) << 24;
  if (icrc(src, dst, datagram.first(body)) != carried) return RxVerdict::kBadIcrc;
  std::span<const uint8_t> payload;
  if (wire::parse_packet(datagram.first(body), &out->headers, &payload) != wire::ParseError::kNone) {
    return RxVerdict::kMalformed;
  }
  if (out->headers.bth.pkey != wire::kDefaultPkey) return RxVerdict::kMalformed;
  out->header_len = wire::header_length(out->headers.bth.opcode);
  out->header_bytes = datagram.first(out->header_len);
  out->payload = payload;
  return RxVerdict::kOk;
}

}  // namespace ferry::nic::udp
