// RoCEv2 encapsulation over UDP/IPv4 (docs/wire-format.md, "RoCEv2 over
// UDP"): the framing of a transport packet as one UDP datagram, its invariant
// CRC, the path MTU an interface allows, and the validation of a received
// datagram.
//
// Everything here is pure (no sockets) so the receive validation can be
// tested and fuzzed byte by byte; the socket side is src/nic/udp_transport.cc.
// Like wire.h, nothing here trusts its input: parse_datagram never reads
// outside the given span and reports bad input as a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ferry/common/status.h"
#include "ferry/nic/types.h"
#include "ferry/nic/wire.h"

namespace ferry::nic::udp {

constexpr size_t kIcrcBytes = 4;
constexpr size_t kIpv4HeaderBytes = 20;  // no IP options
constexpr size_t kUdpHeaderBytes = 8;
// The largest transport header of any opcode (BTH + AtomicETH).
constexpr size_t kMaxTransportHeaderBytes = wire::kBthBytes + wire::kAtomicEthBytes;
// Bytes of a datagram's IP packet that are not path-MTU payload: what
// path_mtu_for_interface subtracts from the interface MTU.
constexpr uint32_t kPathOverheadBytes = kIpv4HeaderBytes + kUdpHeaderBytes + kMaxTransportHeaderBytes + kIcrcBytes;
// The largest UDP payload Ferry sends: headers, a 4096-byte payload, the
// pad (0 for a full MTU) and the ICRC.
constexpr size_t kMaxDatagramBytes = kMaxTransportHeaderBytes + wire::kMaxPayloadBytes + kIcrcBytes;
// The smallest datagram that can be valid: a BTH and the ICRC.
constexpr size_t kMinDatagramBytes = wire::kBthBytes + kIcrcBytes;
static_assert(kMaxTransportHeaderBytes <= wire::kMaxHeaderBytes);

// The largest IB path MTU (256, 512, 1024, 2048 or 4096) whose packets fit
// an interface MTU of `interface_mtu` bytes with their IPv4, UDP, transport
// headers and ICRC. kInvalidArgument if not even 256 fits.
Result<uint32_t> path_mtu_for_interface(uint32_t interface_mtu);

// The MTU of the local interface that holds `ipv4` (host byte order), read
// with SIOCGIFMTU; its name in *name if given. kNotFound if no interface has
// that address.
Result<uint32_t> interface_mtu(uint32_t ipv4, std::string* name = nullptr);

// Continues a reflected IEEE CRC-32 (zlib's crc32, ISA-L's crc32_gzip_refl):
// crc32(crc32(0, a), b) == crc32(0, a || b).
uint32_t crc32(uint32_t crc, std::span<const uint8_t> bytes);

// The invariant CRC of a RoCEv2 datagram from `src` to `dst`: CRC-32 over
// eight 0xFF bytes (the masked LRH of IBTA Annex A17), the IPv4 header
// (TOS, TTL and header checksum masked to ones; total length from the
// datagram; identification 0 and DF set, which is what Linux sends from an
// unconnected UDP socket with path-MTU discovery on), the UDP header
// (checksum masked), the BTH with byte 4 (FECN, BECN, Resv6) masked, and the
// rest of `udp_payload` -- everything but the trailing ICRC, which the
// caller excludes. The ICRC goes on the wire least significant byte first,
// like an Ethernet FCS (rxe and ConnectX do the same). `udp_payload` must
// hold at least a BTH. `ip_identification` is for checking captures of
// other senders; Ferry's datagrams carry 0.
uint32_t icrc(const UdpEndpoint& src, const UdpEndpoint& dst, std::span<const uint8_t> udp_payload,
              uint16_t ip_identification = 0);

// Frames one packet as a UDP payload into `out`: headers || payload || pad
// zero bytes (the BTH's PadCnt, recomputed from the payload length) || ICRC.
// Returns the datagram length, or 0 if the headers are shorter than a BTH
// or `out` is too small.
size_t frame_datagram(std::span<const uint8_t> headers, std::span<const uint8_t> payload, const UdpEndpoint& src,
                      const UdpEndpoint& dst, std::span<uint8_t> out);

enum class RxVerdict : uint8_t {
  kOk = 0,
  kMalformed,  // too short or too long, or headers/pad/payload/P_Key fail the checks of wire-format.md
  kBadIcrc,    // the ICRC does not match: corrupted, or not RoCEv2 at all
};
std::string_view rx_verdict_name(RxVerdict v);

struct ParsedDatagram {
  wire::Headers headers;
  size_t header_len = 0;
  std::span<const uint8_t> header_bytes;  // inside the datagram
  std::span<const uint8_t> payload;       // inside the datagram, pad and ICRC excluded
};

// Validates a datagram received from `src` on the socket bound to `dst`, in
// this order: at least a BTH and an ICRC and at most kMaxDatagramBytes
// (kMalformed); the ICRC (kBadIcrc); then the transport headers as
// NicCore::on_packet checks them (kMalformed). On kOk fills *out, whose
// spans point into `datagram`.
RxVerdict parse_datagram(std::span<const uint8_t> datagram, const UdpEndpoint& src, const UdpEndpoint& dst,
                         ParsedDatagram* out);

}  // namespace ferry::nic::udp
