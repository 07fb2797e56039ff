// GIDs and UDP endpoints: text forms and the IPv4 mapping (types.h).
#include <arpa/inet.h>

#include <charconv>
#include <cstring>

#include "ferry/nic/types.h"

namespace ferry::nic {

namespace {
constexpr uint8_t kIpv4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

Result<uint32_t> parse_ipv4(std::string_view text) {
  char buf[INET_ADDRSTRLEN];
  if (text.empty() || text.size() >= sizeof(buf)) return invalid_argument("not an IPv4 address: '" + std::string(text) + "'");
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  in_addr a{};
  if (inet_pton(AF_INET, buf, &a) != 1) return invalid_argument("not an IPv4 address: '" + std::string(text) + "'");
  return ntohl(a.s_addr);
}

std::string ipv4_text(uint32_t ipv4) {
  in_addr a{};
  a.s_addr = htonl(ipv4);
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}
}  // namespace

Gid Gid::from_ipv4(uint32_t ipv4) {
  Gid g;
  std::memcpy(g.raw.data(), kIpv4MappedPrefix, sizeof(kIpv4MappedPrefix));
  g.raw[12] = static_cast<uint8_t>(ipv4 >> 24);
  g.raw[13] = static_cast<uint8_t>(ipv4 >> 16);
  g.raw[14] = static_cast<uint8_t>(ipv4 >> 8);
  g.raw[15] = static_cast<uint8_t>(ipv4);
  return g;
}

Gid Gid::in_process(uint32_t fabric_address) {
  // EUI-64 of MAC 02:00:00:xx:yy:zz: flip the universal/local bit of the
  // first byte (02 -> 00) and insert ff:fe in the middle.
  Gid g;
  g.raw[0] = 0xFE;
  g.raw[1] = 0x80;
  g.raw[8] = 0x00;
  g.raw[9] = 0x00;
  g.raw[10] = 0x00;
  g.raw[11] = 0xFF;
  g.raw[12] = 0xFE;
  g.raw[13] = static_cast<uint8_t>(fabric_address >> 16);
  g.raw[14] = static_cast<uint8_t>(fabric_address >> 8);
  g.raw[15] = static_cast<uint8_t>(fabric_address);
  return g;
}

bool Gid::is_ipv4_mapped() const { return std::memcmp(raw.data(), kIpv4MappedPrefix, sizeof(kIpv4MappedPrefix)) == 0; }

uint32_t Gid::ipv4() const {
  return static_cast<uint32_t>(raw[12]) << 24 | static_cast<uint32_t>(raw[13]) << 16 |
         static_cast<uint32_t>(raw[14]) << 8 | raw[15];
}

std::string Gid::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, raw.data(), buf, sizeof(buf));
  return buf;
}

Result<Gid> Gid::parse(std::string_view text) {
  if (text.find(':') == std::string_view::npos) {
    FERRY_ASSIGN_OR_RETURN(const uint32_t ipv4, parse_ipv4(text));
    return from_ipv4(ipv4);
  }
  char buf[INET6_ADDRSTRLEN];
  if (text.size() >= sizeof(buf)) return invalid_argument("not a GID: '" + std::string(text) + "'");
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  Gid g;
  if (inet_pton(AF_INET6, buf, g.raw.data()) != 1) return invalid_argument("not a GID: '" + std::string(text) + "'");
  return g;
}

std::string UdpEndpoint::to_string() const { return ipv4_text(ipv4) + ":" + std::to_string(port); }

Result<UdpEndpoint> UdpEndpoint::parse(std::string_view text) {
  UdpEndpoint ep;
  const size_t colon = text.rfind(':');
  FERRY_ASSIGN_OR_RETURN(ep.ipv4, parse_ipv4(text.substr(0, colon)));
  if (colon == std::string_view::npos) return ep;
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return invalid_argument("not a UDP port: '" + std::string(port) + "'");
  }
  ep.port = static_cast<uint16_t>(value);
  return ep;
}

Result<UdpEndpoint> UdpEndpoint::from_gid(const Gid& gid, uint16_t port) {
  if (!gid.is_ipv4_mapped()) return invalid_argument("GID " + gid.to_string() + " is not an IPv4-mapped address");
  return UdpEndpoint{gid.ipv4(), port};
}

}  // namespace ferry::nic
