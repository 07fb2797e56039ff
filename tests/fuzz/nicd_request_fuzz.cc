// libFuzzer target: the NIC daemon's request handler (src/nicd/server.cc),
// which reads whatever a local client sends on the daemon's socket and acts
// on it against the shared NIC.
//
// Input: a sequence of messages, each a 2-byte little-endian length and that
// many bytes, handled in order for one client after a valid HELLO (so that
// the operations themselves are reached). When the input sets bit 0 of its
// first byte, each message's header is made valid (magic, version, length)
// and only the op, seq and body come from the input. Checked properties:
//  - nothing crashes or reads out of bounds (ASan, UBSan), and no engine
//    assertion fires: every handle and argument is checked before the NIC
//    core sees it;
//  - every reply is a well-formed response to the request's op and seq;
//  - releasing the client afterwards leaves no object of it behind.
//
// Run: ./nicd_request_fuzz -max_total_time=60 ../tests/fuzz/corpus/nicd_request_fuzz
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "protocol.h"
#include "server.h"

namespace {

using namespace ferry;
using namespace ferry::nicd;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

struct World {
  World() {
    nic::EngineOptions eo;
    eo.threaded = false;  // control runs inline: one thread, deterministic
    engine = std::make_unique<nic::Engine>(eo);
    nic::NicOptions no;
    no.max_qps = 64;
    no.max_mrs = 256;
    no.max_cqs = 64;
    no.max_srqs = 16;
    nic = engine->add_nic(no).value();
    page_fd = memfd_create("fuzz-page", MFD_CLOEXEC);
    FUZZ_CHECK(page_fd >= 0 && ftruncate(page_fd, 4096) == 0);
  }
  std::unique_ptr<nic::Engine> engine;
  nic::Nic* nic = nullptr;
  int page_fd = -1;
};

World& world() {
  static World w;
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  Server server(w.engine.get(), w.nic, 1u << 20, w.page_fd);
  Client* client = server.add_client(-1);
  proto::Writer hello;
  hello.u32(proto::kVersion);
  hello.str("fuzz");
  Reply first = server.handle(client, proto::frame(static_cast<uint16_t>(proto::Op::kHello), 1, hello).data(),
                              sizeof(proto::Header) + hello.bytes().size(), {});
  FUZZ_CHECK(!first.drop);
  const bool fix_headers = size > 0 && (data[0] & 1);
  size_t off = size > 0 ? 1 : 0;
  int messages = 0;
  while (off + 2 <= size && messages++ < 64) {
    size_t len = static_cast<size_t>(data[off]) | static_cast<size_t>(data[off + 1]) << 8;
    off += 2;
    if (len > size - off) len = size - off;
    std::vector<uint8_t> msg(data + off, data + off + len);
    off += len;
    if (fix_headers) {
      if (msg.size() < sizeof(proto::Header)) msg.resize(sizeof(proto::Header));
      proto::Header h;
      std::memcpy(&h, msg.data(), sizeof(h));
      h.magic = proto::kMagic;
      h.version = proto::kVersion;
      h.op = static_cast<uint16_t>(1 + h.op % (static_cast<uint16_t>(proto::Op::kEnd) - 1));
      h.body_bytes = static_cast<uint32_t>(msg.size() - sizeof(h));
      std::memcpy(msg.data(), &h, sizeof(h));
    }
    Reply reply = server.handle(client, msg.data(), msg.size(), {});
    if (reply.drop) break;
    proto::Header req, rsp;
    FUZZ_CHECK(proto::parse_header(msg.data(), msg.size(), &req));
    FUZZ_CHECK(proto::parse_header(reply.bytes.data(), reply.bytes.size(), &rsp));
    FUZZ_CHECK(rsp.op == (req.op | proto::kResponseBit) && rsp.seq == req.seq);
    proto::Reader r(reply.bytes.data() + sizeof(rsp), rsp.body_bytes);
    (void)proto::get_status(r);
    FUZZ_CHECK(r.ok());
  }
  server.release(client);
  const Server::Census left = server.census();
  FUZZ_CHECK(left.qps == 0 && left.cqs == 0 && left.srqs == 0 && left.mrs == 0 && left.segments == 0);
  FUZZ_CHECK(server.clients() == 0);
  return 0;
}
