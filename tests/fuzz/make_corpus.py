#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets in tests/fuzz/corpus/<target>/.

The seeds are a few well-formed inputs per target (plus a handful of
near-misses) so that libFuzzer starts from the interesting parts of the input
space. Layouts: IBTA BTH/RETH/AETH/AtomicETH/ImmDt/FETH in network byte order
(include/ferry/nic/wire.h) and the WQE slot layout (include/ferry/nic/wqe.h).

Usage: python3 tests/fuzz/make_corpus.py   (from anywhere; rewrites the seeds)
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# RC opcodes.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(0, 6)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(6, 12)
READ_REQUEST, READ_RESP_FIRST, READ_RESP_MIDDLE, READ_RESP_LAST, READ_RESP_ONLY = range(12, 17)
ACK, ATOMIC_ACK, CMP_SWAP, FETCH_ADD, FLUSH = 0x11, 0x12, 0x13, 0x14, 0x1C


def pad_for(n):
    return (4 - n % 4) % 4


def bth(opcode, psn, dest_qp=0, pad=0, se=False, ack_req=False, pkey=0xFFFF):
    b1 = (0x80 if se else 0) | 0x40 | (pad << 4)
    return struct.pack(">BBHB", opcode, b1, pkey, 0) + dest_qp.to_bytes(3, "big") + \
        struct.pack(">B", 0x80 if ack_req else 0) + psn.to_bytes(3, "big")


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def aeth(syndrome, msn):
    return struct.pack(">B", syndrome) + msn.to_bytes(3, "big")


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack(">QIQQ", va, rkey, swap_add, compare)


def imm(v):
    return struct.pack(">I", v)


def feth(selectivity, placement):
    return struct.pack(">I", (selectivity << 4) | placement)


def packet(opcode, psn, ext=b"", payload=b"", **kw):
    pad = pad_for(len(payload))
    return bth(opcode, psn, pad=pad, **kw) + ext + payload + bytes(pad)


def write_corpus(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def pattern(n, seed=1):
    return bytes((seed + 7 * i) & 0xFF for i in range(n))


# ---- packet_parser_fuzz: contiguous packets ---------------------------------------
parser_seeds = {
    "write_only_257": packet(WRITE_ONLY, 0xABCDEF, reth(0x0102030405060708, 0x11223344, 257),
                             pattern(257), dest_qp=0x123456, se=True, ack_req=True),
    "write_only_imm_4": packet(WRITE_ONLY_IMM, 1, reth(0x1000, 0x100, 4) + imm(0xCAFEBABE), pattern(4)),
    "write_first_256": packet(WRITE_FIRST, 2, reth(0x2000, 0x200, 600), pattern(256)),
    "write_middle_256": packet(WRITE_MIDDLE, 3, b"", pattern(256)),
    "write_last_imm_88": packet(WRITE_LAST_IMM, 4, imm(7), pattern(88), ack_req=True),
    "send_only_imm_5": packet(SEND_ONLY_IMM, 5, imm(0x1234), pattern(5), se=True),
    "send_first_256": packet(SEND_FIRST, 6, b"", pattern(256)),
    "send_last_3": packet(SEND_LAST, 7, b"", pattern(3)),
    "read_request": packet(READ_REQUEST, 8, reth(0x3000, 0x300, 3000), ack_req=True),
    "read_response_first": packet(READ_RESP_FIRST, 9, aeth(0x1F, 2), pattern(256)),
    "read_response_middle": packet(READ_RESP_MIDDLE, 10, b"", pattern(256)),
    "read_response_last_1": packet(READ_RESP_LAST, 11, aeth(0x1F, 3), pattern(1)),
    "read_response_only_0": packet(READ_RESP_ONLY, 12, aeth(0x1F, 4)),
    "ack": packet(ACK, 0x100, aeth(0x1F, 0xABCD), dest_qp=7),
    "nak_access": packet(ACK, 0x100, aeth(0x62, 0xABCD), dest_qp=7),
    "rnr_nak": packet(ACK, 0x100, aeth(0x2E, 1)),
    "atomic_ack": packet(ATOMIC_ACK, 0xFFFFFF, aeth(0x1F, 3) + struct.pack(">Q", 0x0123456789ABCDEF)),
    "compare_swap": packet(CMP_SWAP, 0, atomic_eth(0x1122334455667788, 0xDEADBEEF, 0xA1A2A3A4A5A6A7A8,
                                                   0xB1B2B3B4B5B6B7B8), dest_qp=0xFFFFFF, ack_req=True),
    "fetch_add": packet(FETCH_ADD, 13, atomic_eth(0x4000, 0x400, 1, 0), ack_req=True),
    "flush": packet(FLUSH, 14, feth(1, 2) + reth(0xAABBCCDD00112233, 0x01020304, 0x40), ack_req=True),
    "send_only_4096": packet(SEND_ONLY, 15, b"", pattern(4096)),
    # Near misses.
    "truncated_reth": packet(WRITE_ONLY, 16, reth(0x1000, 1, 8), pattern(8))[:20],
    "bad_opcode": bytes([0x15]) + bytes(11),
    "bad_tver": bytes([SEND_ONLY, 0x41]) + bytes(10),
    "bad_pad": bth(SEND_ONLY, 17, pad=0) + pattern(5),
    "payload_on_read": packet(READ_REQUEST, 18, reth(0, 0, 0)) + bytes(4),
}
write_corpus("packet_parser_fuzz", parser_seeds)


# ---- wqe_decode_fuzz: [send stride code][max_sge][max_inline lo][hi][recv stride code][recv max_sge] slot
def send_wqe(opcode, flags=0, num_ds=0, imm_data=0, wr_id=0, remote_addr=0, rkey=0, aux=0, compare_add=0,
             swap=0, data=b""):
    return struct.pack("<BBHIQQIIQQ", opcode, flags, num_ds, imm_data, wr_id, remote_addr, rkey, aux,
                       compare_add, swap) + data


def data_seg(addr, length, lkey):
    return struct.pack("<QII", addr, length, lkey)


RECV_POSTED = 1  # RecvWqeHeader.flags: a slot without it holds no RECV


def recv_wqe(wr_id, sges):
    return struct.pack("<QHHI", wr_id, len(sges), RECV_POSTED, 0) + b"".join(data_seg(*s) for s in sges)


def config(send_code, max_sge, max_inline, recv_code, recv_max):
    return struct.pack("<BBHBB", send_code, max_sge, max_inline, recv_code, recv_max)


SIGNALED, FENCE, SOLICITED, INLINE = 1, 2, 4, 8
# WrOpcode values (include/ferry/nic/types.h); 0 is an empty slot.
(OP_WRITE, OP_WRITE_IMM, OP_SEND, OP_SEND_IMM, OP_READ, OP_CAS, OP_FAA, OP_NOP, OP_WAIT, OP_SEND_ENABLE,
 OP_RECV_ENABLE, OP_FLUSH) = range(1, 13)
wqe_seeds = {
    "write_1sge": config(0, 1, 0, 1, 2) + send_wqe(OP_WRITE, SIGNALED, 1, 0, 1, 0x7000, 0x42,
                                                   data=data_seg(0x1000, 64, 0x101)),
    "send_3sge": config(1, 3, 0, 2, 3) + send_wqe(OP_SEND, SIGNALED | SOLICITED, 3, 0, 2,
                                                  data=data_seg(0x1000, 1, 1) + data_seg(0x2000, 2, 2)
                                                  + data_seg(0x3000, 3, 3)),
    "inline_100": config(2, 1, 100, 0, 1) + send_wqe(OP_SEND_IMM, INLINE | SIGNALED, 100, 0x55, 3, data=pattern(100)),
    "cas": config(0, 1, 0, 0, 1) + send_wqe(OP_CAS, SIGNALED | FENCE, 1, 0, 4, 0x8000, 0x43, 0, 5, 6,
                                            data=data_seg(0x4000, 8, 0x104)),
    "wait": config(0, 1, 0, 0, 1) + send_wqe(OP_WAIT, SIGNALED, 0, 0, 5, 12345, 3),
    "send_enable": config(0, 1, 0, 0, 1) + send_wqe(OP_SEND_ENABLE, 0, 0, 0, 6, 7, 0x000345),
    "flush": config(0, 1, 0, 0, 1) + send_wqe(OP_FLUSH, SIGNALED, 0, 0, 7, 0x9000, 0x44, 1, 4096),
    "recv_2sge": config(0, 30, 976, 1, 2) + recv_wqe(99, [(0xA000, 10, 0x11), (0xB000, 20, 0x22)]),
    "max_stride": config(4, 30, 976, 4, 31) + send_wqe(OP_WRITE, INLINE, 976, data=pattern(976)),
    "empty_slot": config(0, 1, 0, 0, 1) + bytes(64),
}
write_corpus("wqe_decode_fuzz", wqe_seeds)


# ---- nic_rx_fuzz: [mode] then [ctl][len lo][len hi][bytes] records ------------------------
# ctl bits: 0 DestQP:=qb, 1 wrong source, 2 P_Key:=default, 3 PSN:=expected+int8(byte 11),
#           4 pad:=payload's, 5 VA/rkey:=B's MR (VA taken modulo 64 KiB), 6 run first, 7 raw split.
STEER = 0x01 | 0x04 | 0x08 | 0x10 | 0x20   # a packet the responder accepts
STEER_RESPONSE = 0x01 | 0x04 | 0x10        # keep the PSN as written (qb's requester PSNs)
MTU_256, MTU_1024, MTU_4096 = 0x00, 0x20, 0x40


def record(ctl, pkt):
    return struct.pack("<BH", ctl, len(pkt)) + pkt


def rx(mode, *records):
    return bytes([mode]) + b"".join(records)


# With ctl bit 3 the PSN byte 11 is the offset from the PSN qb expects next.
nic_seeds = {
    "write_only": rx(MTU_256, record(STEER, packet(WRITE_ONLY, 0, reth(0x100, 0, 64), pattern(64),
                                                   ack_req=True))),
    "write_multi": rx(MTU_256,
                      record(STEER, packet(WRITE_FIRST, 0, reth(0x1000, 0, 600), pattern(256))),
                      record(STEER, packet(WRITE_MIDDLE, 1, b"", pattern(256))),
                      record(STEER, packet(WRITE_LAST_IMM, 2, imm(9), pattern(88), ack_req=True))),
    "send_multi": rx(MTU_256,
                     record(STEER, packet(SEND_FIRST, 0, b"", pattern(256))),
                     record(STEER, packet(SEND_MIDDLE, 1, b"", pattern(256))),
                     record(STEER, packet(SEND_LAST_IMM, 2, imm(5), pattern(10), se=True, ack_req=True)),
                     record(STEER, packet(SEND_ONLY, 3, b"", pattern(200), ack_req=True))),
    "read_atomic_flush": rx(MTU_1024,
                            record(STEER, packet(READ_REQUEST, 0, reth(0x2000, 0, 3000), ack_req=True)),
                            record(STEER, packet(CMP_SWAP, 3, atomic_eth(0x3000, 0, 5, 0x3C3C3C3C3C3C3C3C),
                                                 ack_req=True)),
                            record(STEER, packet(FETCH_ADD, 4, atomic_eth(0x3008, 0, 1, 0), ack_req=True)),
                            record(STEER, packet(FLUSH, 5, feth(0, 2) + reth(0x2000, 0, 64), ack_req=True)),
                            record(STEER, packet(CMP_SWAP, 3, atomic_eth(0x3000, 0, 5, 0), ack_req=True)),
                            record(STEER, packet(READ_REQUEST, 0, reth(0x2000, 0, 3000), ack_req=True))),
    "sequence_gap": rx(MTU_4096,
                       record(STEER, packet(SEND_ONLY, 2, b"", pattern(8))),
                       record(STEER, packet(SEND_ONLY, 0, b"", pattern(8), ack_req=True)),
                       record(STEER, packet(SEND_ONLY, 1, b"", pattern(8), ack_req=True))),
    "responses_to_qb": rx(0x1F | MTU_4096,
                          record(STEER_RESPONSE, packet(ACK, 0x20, aeth(0x1F, 1))),
                          record(STEER_RESPONSE, packet(READ_RESP_FIRST, 0x21, aeth(0x1F, 1), pattern(4096))),
                          record(STEER_RESPONSE, packet(READ_RESP_LAST, 0x22, aeth(0x1F, 2), pattern(904))),
                          record(STEER_RESPONSE, packet(ATOMIC_ACK, 0x23, aeth(0x1F, 3) + struct.pack(">Q", 42))),
                          record(STEER_RESPONSE, packet(ACK, 0x24, aeth(0x60, 3))),
                          record(STEER_RESPONSE, packet(ACK, 0x25, aeth(0x21, 3)))),
    "naks_to_qb": rx(0x03 | MTU_1024,
                     record(STEER_RESPONSE, packet(ACK, 0x21, aeth(0x2E, 0))),
                     record(STEER_RESPONSE | 0x40, packet(ACK, 0x21, aeth(0x62, 0)))),
    "junk": rx(MTU_256,
               record(0x00, bytes([0x15]) + bytes(30)),
               record(STEER | 0x02, packet(SEND_ONLY, 0, b"", pattern(4))),
               record(STEER | 0x80, packet(WRITE_ONLY, 0, reth(0, 0, 40), pattern(40))),
               record(STEER & ~0x04, packet(SEND_ONLY, 0, b"", pattern(4), pkey=0x7FFF))),
}
write_corpus("nic_rx_fuzz", nic_seeds)


# ---- naive_header_fuzz: Naive-RDMA operation headers (src/hyperloop/naive_wire.h) -------
# 112 bytes, little-endian; the target parses them against a 1 MiB region (and a
# 113th byte, when present, picks a small region: byte * 4096 + 8).
NAIVE_MAGIC, NAIVE_VERSION = 0x564E5246, 1
GWRITE, GCAS, GMEMCPY, GFLUSH = range(4)
NAIVE_REGION = 1 << 20


def naive_header(primitive, replicas=3, seq=0, offset=0, src_offset=0, size=0, flush=False, execute_map=0,
                 old=0, new=0, results=(), magic=NAIVE_MAGIC, version=NAIVE_VERSION):
    res = list(results) + [0] * (7 - len(results))
    return struct.pack("<IBBBBQQQIB3xQQ7Q", magic, version, primitive, 1 if flush else 0, replicas, seq, offset,
                       src_offset, size, execute_map, old, new, *res)


naive_seeds = {
    "gwrite_3000": naive_header(GWRITE, seq=1, offset=100, size=3000),
    "gwrite_flush_last_byte": naive_header(GWRITE, replicas=7, seq=2, offset=NAIVE_REGION - 1, size=1, flush=True),
    "gcas_partial_map": naive_header(GCAS, seq=3, offset=4096, size=8, execute_map=0b101, old=0xAAAA, new=0x5555,
                                     results=(0xAAAA, 0, 7)),
    "gcas_all_of_7": naive_header(GCAS, replicas=7, seq=4, offset=NAIVE_REGION - 8, size=8, execute_map=0x7F,
                                  flush=True, old=1, new=2, results=(1, 2, 3, 4, 5, 6, 7)),
    "gcas_empty_map": naive_header(GCAS, replicas=1, seq=5, offset=0, size=8),
    "gmemcpy_flush": naive_header(GMEMCPY, seq=6, offset=8192, src_offset=0, size=4096, flush=True),
    "gflush": naive_header(GFLUSH, seq=0xFFFFFFFFFFFFFFFF, flush=True),
    "gwrite_small_region": naive_header(GWRITE, seq=7, offset=4000, size=100) + bytes([1]),
    # Near misses.
    "bad_magic": naive_header(GWRITE, offset=100, size=10, magic=0x564E5247),
    "gcas_misaligned": naive_header(GCAS, offset=4100, size=8, execute_map=1),
    "gmemcpy_overlap": naive_header(GMEMCPY, offset=8192, src_offset=8000, size=4096),
    "truncated": naive_header(GWRITE, offset=100, size=10)[:100],
}
write_corpus("naive_header_fuzz", naive_seeds)

# ---- RPC requests (include/ferry/rpc/format.h); the targets fix up checksums ----
def rpc_request(size, type_=1, flags=0, version=1, request_id=7, origin=0, payload=b""):
    body = struct.pack("<IHBBQII", size, type_, flags, version, request_id, origin, 0) + payload
    return struct.pack("<Q", 0) + body


rpc_payload = struct.pack("<H", 3) + b"keyvalue"
rpc_ok = rpc_request(32 + len(rpc_payload), payload=rpc_payload)
rpc_response = struct.pack("<QIBBHII", 7, 24 + 5, 1, 0, 0, 0, 0) + b"value"
rpc_request_seeds = {
    # [mode][max lo][max hi]: mode 3 = exact + fix checksum, 2 = scan + fix.
    "exact_fixed": bytes([3, 0, 2]) + rpc_ok,
    "scan_fixed_trailing": bytes([2, 0, 2]) + rpc_ok + b"\0" * 40,
    "nilext": bytes([3, 0, 2]) + rpc_request(32 + len(rpc_payload), flags=1, payload=rpc_payload),
    "empty_payload": bytes([3, 0, 0]) + rpc_request(32),
    "size_too_big": bytes([3, 0, 2]) + rpc_request(4000, payload=rpc_payload),
    "bad_version": bytes([3, 0, 2]) + rpc_request(32 + len(rpc_payload), version=9, payload=rpc_payload),
    "unfixed": bytes([1, 0, 2]) + rpc_ok,
    "response": bytes([0, 0, 0]) + rpc_response,
    "short": bytes([1, 0, 0]) + rpc_ok[:20],
}

# The CM handshake's private data (src/rpc/connect_wire.h), little-endian:
# request magic u32, version u16, reserved u16, worker u32; reply magic,
# version, mode u8, durable u8, worker u32, workers u32, max request/response
# bytes u32 u32, flush addr u64, flush rkey u32, nilext count u32, the types u16...
CONNECT_MAGIC, CONNECT_VERSION = 0x43505246, 1
MODE_RAW, MODE_DEFERRED, MODE_OQ = range(3)


def connect_request(worker, version=CONNECT_VERSION, reserved=0):
    return struct.pack("<IHHI", CONNECT_MAGIC, version, reserved, worker)


def connect_reply(mode, durable, worker, workers, max_request, max_response, flush_addr=0, flush_rkey=0,
                  nilext=(), count=None, version=CONNECT_VERSION):
    return struct.pack("<IHBBIIIIQII", CONNECT_MAGIC, version, mode, durable, worker, workers, max_request,
                       max_response, flush_addr, flush_rkey, len(nilext) if count is None else count) + \
        b"".join(struct.pack("<H", t) for t in nilext)


rpc_request_seeds.update({
    # [mode][max lo][max hi] as above (mode 0: no checksum fix-up), then the private data.
    "connect_request": bytes([0, 0, 0]) + connect_request(1),
    "connect_request_other_version": bytes([0, 0, 0]) + connect_request(1, version=2),
    "connect_reply_oq_durable": bytes([0, 0, 0]) + connect_reply(MODE_OQ, 1, 1, 2, 4096, 4096, 0x7F0000001000,
                                                                 0x1234, nilext=(1, 4)),
    "connect_reply_raw": bytes([0, 0, 0]) + connect_reply(MODE_RAW, 0, 0, 1, 32, 24),
    "connect_reply_deferred_max": bytes([0, 0, 0]) + connect_reply(MODE_DEFERRED, 0, 63, 64, 1 << 20, 1 << 20,
                                                                   nilext=(0, 65535)),
    "connect_reply_count_mismatch": bytes([0, 0, 0]) + connect_reply(MODE_OQ, 0, 0, 2, 4096, 4096, nilext=(1, 4),
                                                                     count=3),
})
write_corpus("rpc_request_fuzz", rpc_request_seeds)


def durable_area(buffers, strides_code, stride_code, requests, rte=0, tail=1, control=3):
    stride = 64 << stride_code
    buffer_bytes = stride << strides_code
    area = bytearray(256 + buffers * buffer_bytes)
    for (buf, st, req) in requests:
        at = 256 + buf * buffer_bytes + st * stride
        area[at:at + len(req)] = req
    cfg = bytes([buffers - 1, strides_code, stride_code, control]) + struct.pack("<HH", rte, tail)
    return cfg + bytes(area)


rpc_scan_seeds = {
    "two_requests": durable_area(2, 3, 0, [(0, 0, rpc_ok), (0, 1, rpc_ok)], 0, 2),
    "gap_then_request": durable_area(2, 3, 0, [(0, 3, rpc_ok), (1, 0, rpc_ok)], 1, 2),
    "torn_middle": durable_area(1, 4, 0, [(0, 0, rpc_ok), (0, 1, rpc_ok[:30]), (0, 2, rpc_ok)], 0, 1),
    "wrapped_ring": durable_area(2, 2, 1, [(0, 0, rpc_ok), (1, 0, rpc_ok)], 6, 4),
    "rte_past_tail": durable_area(1, 2, 0, [(0, 0, rpc_ok)], 9, 1),
    "raw_control": durable_area(1, 2, 0, [(0, 0, rpc_ok)], 0, 1, control=0),
}
write_corpus("rpc_recovery_scan_fuzz", rpc_scan_seeds)

# ---- logkv_request_fuzz: LogKv requests and control messages (src/store/logkv_internal.h) ----
# Little-endian. A request: table u64, expected version u64, flags u8,
# reserved u8, key bytes u16, value bytes u32, key, value. A restore batch:
# max version u64, then objects of table u64, version u64, key bytes u16,
# value bytes u32, key, value. A table map: table u64, name bytes u16, name,
# owner count u32, owners u32... An assignment: table u64, tablets u32, count
# u32, tablets u32...
def logkv_request(table, key, value=b"", expected=0, flags=0, key_bytes=None):
    return struct.pack("<QQBBHI", table, expected, flags, 0, len(key) if key_bytes is None else key_bytes,
                       len(value)) + key + value


def restore(max_version, objects):
    return struct.pack("<Q", max_version) + b"".join(
        struct.pack("<QQHI", table, version, len(key), len(value)) + key + value
        for (table, version, key, value) in objects)


def table_map(table, name, owners):
    return struct.pack("<QH", table, len(name)) + name + struct.pack("<I", len(owners)) + \
        b"".join(struct.pack("<I", o) for o in owners)


def assignment(table, tablets, owned):
    return struct.pack("<QII", table, tablets, len(owned)) + b"".join(struct.pack("<I", t) for t in owned)


logkv_seeds = {
    "put": logkv_request(1, b"alice", b"value"),
    "get": logkv_request(1, b"bob"),
    "cond_put": logkv_request(2, b"k", expected=7, flags=1),
    "bad_size": logkv_request(1, b"bobx", key_bytes=3),
    "restore_two": restore(9, [(1, 3, b"alice", b"value"), (2, 9, b"k", b"")]),
    "restore_empty": restore(5, []),
    "restore_version_above_max": restore(2, [(1, 3, b"k", b"v")]),
    "table_map": table_map(1, b"usertable", [0, 1, 2, 0]),
    "table_map_no_owners": table_map(3, b"t", []),
    "assignment": assignment(1, 8, [1, 5, 7]),
    "assignment_out_of_range": assignment(1, 4, [4]),
}
write_corpus("logkv_request_fuzz", logkv_seeds)

# HyperLoop's transaction log: [mode] [log lines] bytes (txn_log_fuzz.cc).
# Mode 1 steers records (4 bytes each: entries, length, offset, value), the
# last two bytes choose the corrupted bit; mode 0 is a raw region (mode 2:
# and its database read as a store image of 16 slots, key and value <= 16 B).
txn_seeds = {
    "built_three_records": bytes([1, 32]) + bytes([1, 40, 3, 0x61, 0, 7, 9, 0x62, 2, 100, 200, 0x63, 5, 5, 5, 5]) + b"\x10\x00",
    "built_many": bytes([1, 63]) + pattern(160, 3) + b"\x00\x01",
    "raw_zero_ring": bytes([0, 8]) + bytes(8) + bytes(256),
    "raw_pattern": bytes([0, 16]) + pattern(600, 5),
    # head 0, a 128-byte ring of zeros, then a TxnKv header (HLPTXKV2; slots,
    # key_max, value_max, locks, index levels) and an index pointer or two.
    "store_image": bytes([2, 1]) + bytes(8) + bytes(128) + b"HLPTXKV2" +
    struct.pack("<5I", 16, 16, 16, 2, 12) + bytes(36 + 16 * 64) + struct.pack("<3I", 1, 2, 0),
}
# Mode bit 2: the bytes are also parsed as a read-service request (8-byte
# header: u16 key bytes, u8 flags, u8 0, u32 count; the key) and reply
# (u8 status, u8 flags, u16 0, u32 entries; per entry u16 key, u16 0, u32
# value bytes, key, value).
txn_seeds["read_get"] = bytes([4, 1]) + struct.pack("<HBBI", 9, 0, 0, 0) + b"key000001"
txn_seeds["read_scan_after"] = bytes([4, 1]) + struct.pack("<HBBI", 3, 1, 0, 64) + b"key"
txn_seeds["read_reply"] = bytes([4, 1]) + struct.pack("<BBHI", 0, 1, 0, 2) + \
    struct.pack("<HHI", 1, 0, 2) + b"ab1" + struct.pack("<HHI", 2, 0, 0) + b"b2"
txn_seeds["store_image_read"] = bytes([6]) + txn_seeds["store_image"][1:]
write_corpus("txn_log_fuzz", txn_seeds)

if __name__ == "__main__":
    for t in ("packet_parser_fuzz", "wqe_decode_fuzz", "nic_rx_fuzz", "naive_header_fuzz", "rpc_request_fuzz",
              "rpc_recovery_scan_fuzz", "logkv_request_fuzz", "txn_log_fuzz"):
        print(t, len(os.listdir(os.path.join(HERE, "corpus", t))), "seeds")
