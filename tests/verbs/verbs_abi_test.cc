// libibverbs.so.1 over the NIC daemon, called as a verbs program calls it:
// through <infiniband/verbs.h>, its inline functions and the ops table,
// against two NIC daemons of this process on loopback addresses of their
// own (the RoCE port, 4791). What a program sees is checked against the
// verbs specification (../shared/verbs-semantics.md) and what rdma-core's
// providers return: data placed by WRITE, READ, SEND and atomics in memory
// the program allocated with malloc; completions' fields; the errors of
// what is unsupported or out of order; a daemon's death.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/nicd/nicd.h"

namespace {

// 127.<a>.<b>.1 and .2: loopback addresses of this process alone, so that
// parallel test processes' daemons never share one on the RoCE port.
uint32_t daemon_ip(int which) {
  const auto pid = static_cast<uint32_t>(getpid());
  return (127u << 24) | ((20 + pid % 200) << 16) | (((pid / 200) % 250 + 1) << 8) | static_cast<uint32_t>(which + 1);
}

std::string socket_path(int which) {
  return "/tmp/ferry-verbs-test-" + std::to_string(getpid()) + (which == 0 ? "-a" : "-b") + ".sock";
}

// FERRY_NICD is read once, at the library's first device-list call.
const bool env_set = [] {
  setenv("FERRY_NICD", (socket_path(0) + "," + socket_path(1)).c_str(), 1);
  return true;
}();

class VerbsAbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(env_set);
    for (int i = 0; i < 2; ++i) {
      ferry::nicd::DaemonOptions o;
      o.socket_path = socket_path(i);
      o.bind = ferry::nic::UdpEndpoint{daemon_ip(i), ferry::nic::kRoceV2UdpPort};
      o.spin_ns = 50'000;
      o.arena_bytes = 8u << 20;
      auto d = ferry::nicd::Daemon::start(o);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      daemons_[i] = std::move(*d);
    }
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ASSERT_NE(list, nullptr);
    ASSERT_EQ(n, 2);
    for (int i = 0; i < 2; ++i) {
      ctx_[i] = ibv_open_device(list[i]);
      ASSERT_NE(ctx_[i], nullptr) << "errno " << errno;
      pd_[i] = ibv_alloc_pd(ctx_[i]);
      ASSERT_NE(pd_[i], nullptr);
      cq_[i] = ibv_create_cq(ctx_[i], 64, nullptr, nullptr, 0);
      ASSERT_NE(cq_[i], nullptr);
    }
    ibv_free_device_list(list);
  }

  void TearDown() override {
    for (auto& [qp, unused] : qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
    for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    for (int i = 0; i < 2; ++i) {
      if (cq_[i] != nullptr) {
        EXPECT_EQ(ibv_destroy_cq(cq_[i]), 0);
      }
      if (pd_[i] != nullptr) {
        EXPECT_EQ(ibv_dealloc_pd(pd_[i]), 0);
      }
      if (ctx_[i] != nullptr) {
        EXPECT_EQ(ibv_close_device(ctx_[i]), 0);
      }
    }
    for (auto& d : daemons_) d.reset();
  }

  ibv_qp* create_qp(int i, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr a{};
    a.send_cq = cq_[i];
    a.recv_cq = cq_[i];
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 16;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = 64;
    ibv_qp* qp = ibv_create_qp(pd_[i], &a);
    if (qp != nullptr) qps_.emplace_back(qp, i);
    return qp;
  }

  // RESET -> INIT -> RTR -> RTS toward `remote` on context `j`, as
  // ibv_rc_pingpong does it (GID addressing: RoCE needs the GRH).
  int connect(ibv_qp* qp, int j, ibv_qp* remote) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return rc;
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote->qp_num;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.hop_limit = 1;
    EXPECT_EQ(ibv_query_gid(ctx_[j], 1, 0, &a.ah_attr.grh.dgid), 0);
    if (int rc = ibv_modify_qp(qp, &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      return rc;
    }
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 100;
    a.max_rd_atomic = 4;
    return ibv_modify_qp(
        qp, &a,
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }

  ibv_mr* reg(int i, void* addr, size_t len) {
    ibv_mr* mr = ibv_reg_mr(
        pd_[i], addr, len,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  // Polls context i's CQ until one completion arrives (10 s at most).
  ibv_wc wait_wc(int i) {
    ibv_wc wc{};
    for (int spins = 0; spins < 10'000'000; ++spins) {
      const int n = ibv_poll_cq(cq_[i], 1, &wc);
      if (n < 0) ADD_FAILURE() << "ibv_poll_cq returned " << n;
      if (n != 0) return wc;
      if (spins % 1000 == 999) usleep(1000);
    }
    ADD_FAILURE() << "no completion";
    return wc;
  }

  std::unique_ptr<ferry::nicd::Daemon> daemons_[2];
  ibv_context* ctx_[2] = {};
  ibv_pd* pd_[2] = {};
  ibv_cq* cq_[2] = {};
  std::vector<std::pair<ibv_qp*, int>> qps_;
  std::vector<ibv_mr*> mrs_;
};

TEST_F(VerbsAbiTest, EachDaemonIsARoceV2PortWhoseGidIsItsAddress) {
  for (int i = 0; i < 2; ++i) {
    ibv_port_attr port{};
    ASSERT_EQ(ibv_query_port(ctx_[i], 1, &port), 0);
    EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(port.gid_tbl_len, 1);
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_[i], 1, 0, &gid), 0);
    const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    EXPECT_EQ(std::memcmp(gid.raw, mapped, 12), 0);
    const uint32_t ip = daemon_ip(i);
    EXPECT_EQ(gid.raw[12], ip >> 24);
    EXPECT_EQ(gid.raw[15], ip & 0xFF);
    EXPECT_EQ(ibv_query_gid(ctx_[i], 1, 1, &gid), -1);  // one GID only
    ibv_gid_entry entry{};
    ASSERT_EQ(ibv_query_gid_ex(ctx_[i], 1, 0, &entry, 0), 0);
    EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
    ibv_device_attr dev{};
    ASSERT_EQ(ibv_query_device(ctx_[i], &dev), 0);
    EXPECT_EQ(dev.phys_port_cnt, 1);
    EXPECT_EQ(dev.atomic_cap, IBV_ATOMIC_HCA);
  }
  EXPECT_STREQ(ibv_get_device_name(ctx_[0]->device), "ferry0");
  EXPECT_STREQ(ibv_get_device_name(ctx_[1]->device), "ferry1");
  EXPECT_NE(ibv_get_device_guid(ctx_[0]->device), ibv_get_device_guid(ctx_[1]->device));
}

TEST_F(VerbsAbiTest, WriteReadSendAndAtomicsMoveTheProgramsOwnMemory) {
  ibv_qp* a = create_qp(0);
  ibv_qp* b = create_qp(1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(connect(a, 1, b), 0);
  ASSERT_EQ(connect(b, 0, a), 0);
  EXPECT_EQ(a->state, IBV_QPS_RTS);
  // malloc'd, not page-aligned, with neighbours on the same pages that
  // must keep their contents through the registration; a's and b's
  // buffers on pages of their own (ranges that share part of their pages
  // are refused, RegisteringKeepsContentsAndOverlapsAreResolved).
  std::vector<uint8_t> heap(40000);
  for (size_t i = 0; i < heap.size(); ++i) heap[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  const std::vector<uint8_t> heap0 = heap;
  const std::span<uint8_t> la(heap.data() + 100, 5000), lb(heap.data() + 20000, 7000);
  const std::vector<uint8_t> la0(la.begin(), la.end()), lb0(lb.begin(), lb.end());
  ibv_mr* ma = reg(0, la.data() + 100, 4096);
  ibv_mr* mb = reg(1, lb.data() + 8, 6000);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  EXPECT_EQ(heap, heap0);
  // The same bytes registered with the other daemon too.
  ibv_mr* mb0 = reg(0, lb.data() + 8, 6000);
  ASSERT_NE(mb0, nullptr);
  EXPECT_EQ(heap, heap0);

  // WRITE 1000 bytes from a into b at offset 500.
  ibv_sge sge{reinterpret_cast<uintptr_t>(la.data() + 100), 1000, ma->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(lb.data() + 8 + 500);
  wr.wr.rdma.rkey = mb->rkey;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  ibv_wc wc = wait_wc(0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc.qp_num, a->qp_num);
  EXPECT_EQ(std::memcmp(lb.data() + 508, la.data() + 100, 1000), 0);
  EXPECT_EQ(std::memcmp(lb.data(), lb0.data(), 508), 0);

  // READ 200 bytes of b (offset 0) into a at offset 2000.
  sge = ibv_sge{reinterpret_cast<uintptr_t>(la.data() + 2100), 200, ma->lkey};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(lb.data() + 8);
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  wc = wait_wc(0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, 200u);
  EXPECT_EQ(std::memcmp(la.data() + 2100, lb0.data() + 8, 200), 0);

  // SEND with immediate into a posted receive.
  ibv_sge rsge{reinterpret_cast<uintptr_t>(lb.data() + 4008), 2000, mb->lkey};
  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  rwr.wr_id = 77;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ASSERT_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
  sge = ibv_sge{reinterpret_cast<uintptr_t>(la.data() + 300), 33, ma->lkey};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(0xC0FFEE);
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  wc = wait_wc(0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  wc = wait_wc(1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 33u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xC0FFEEu);
  EXPECT_EQ(wc.qp_num, b->qp_num);
  EXPECT_EQ(wc.src_qp, a->qp_num);
  EXPECT_EQ(std::memcmp(lb.data() + 4008, la.data() + 300, 33), 0);

  // Atomics on an 8-byte-aligned word of b.
  auto* word = reinterpret_cast<uint64_t*>(lb.data() + 8 + 3000);
  *word = 40;
  uint8_t* result_bytes = la.data() + 104;  // the fetched value lands here (any alignment)
  auto result = [&] {
    uint64_t v;
    std::memcpy(&v, result_bytes, 8);
    return v;
  };
  sge = ibv_sge{reinterpret_cast<uintptr_t>(result_bytes), 8, ma->lkey};
  wr.wr_id = 4;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(word);
  wr.wr.atomic.rkey = mb->rkey;
  wr.wr.atomic.compare_add = 2;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  wc = wait_wc(0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(result(), 40u);
  EXPECT_EQ(*word, 42u);
  wr.wr_id = 5;
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 7;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  wc = wait_wc(0);
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(result(), 42u);
  EXPECT_EQ(*word, 7u);

  // A WRITE outside b's MR: the responder's access error, then a flush.
  sge = ibv_sge{reinterpret_cast<uintptr_t>(la.data() + 100), 16, ma->lkey};
  wr.wr_id = 6;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(lb.data() + 8 + 5990);
  wr.wr.rdma.rkey = mb->rkey;
  ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
  wc = wait_wc(0);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(qi.send_cq, cq_[0]);
}

TEST_F(VerbsAbiTest, WhatTheNicCannotDoFailsAsAProviderFails) {
  // UD and UC queue pairs.
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_[0];
  ia.recv_cq = cq_[0];
  ia.cap.max_send_wr = 4;
  ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_UD;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_[0], &ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Extended verbs: not offered, not a crash.
  ibv_cq_init_attr_ex cqa{};
  cqa.cqe = 8;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_[0], &cqa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_device_attr_ex ex{};
  EXPECT_EQ(ibv_query_device_ex(ctx_[0], nullptr, &ex), 0);  // the legacy fallback
  EXPECT_EQ(ex.orig_attr.phys_port_cnt, 1);
  // An MR with on-demand paging.
  std::vector<uint8_t> buf(4096);
  errno = 0;
  int odp = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
  EXPECT_EQ(ibv_reg_mr(pd_[0], buf.data(), buf.size(), odp), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Destroying what is in use: EBUSY, the objects intact.
  ibv_qp* qp = create_qp(0);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq_[0]), EBUSY);
  ibv_mr* mr = reg(0, buf.data(), buf.size());
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd_[0]), EBUSY);
  // RTR without the GRH: a RoCE port needs the peer's GID.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = qp->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EINVAL);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  // Posting in INIT, and a WR list whose second WR has an opcode the NIC
  // lacks: bad_wr names the first WR not posted.
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 8, mr->lkey};
  ibv_send_wr w[2]{};
  w[0].sg_list = &sge;
  w[0].num_sge = 1;
  w[0].opcode = IBV_WR_SEND;
  w[0].next = &w[1];
  w[1].opcode = IBV_WR_LOCAL_INV;
  ibv_send_wr* bad = nullptr;
  EXPECT_NE(ibv_post_send(qp, &w[0], &bad), 0);
  EXPECT_EQ(bad, &w[0]);  // in INIT nothing is posted
}

TEST_F(VerbsAbiTest, RegisteringKeepsContentsAndOverlapsAreResolved) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(page, 8 * page));
  for (size_t i = 0; i < 8 * page; ++i) raw[i] = static_cast<uint8_t>(i ^ (i >> 8));
  ibv_mr* whole = reg(0, raw, 4 * page);
  ASSERT_NE(whole, nullptr);
  // Inside the first: the same pages, another MR.
  ibv_mr* inner = reg(0, raw + 10, page);
  ASSERT_NE(inner, nullptr);
  EXPECT_NE(inner->lkey, whole->lkey);
  // Crossing its end: refused, nothing moved.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_[0], raw + 3 * page, 2 * page, static_cast<int>(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The contents survived the move into the memory file.
  for (size_t i = 0; i < 8 * page; ++i) ASSERT_EQ(raw[i], static_cast<uint8_t>(i ^ (i >> 8))) << i;
  raw[5] = 0xAB;  // still the program's memory
  EXPECT_EQ(raw[5], 0xAB);
  EXPECT_EQ(ibv_dereg_mr(inner), 0);
  EXPECT_EQ(ibv_dereg_mr(whole), 0);
  mrs_.clear();
  // Released: the crossing range registers now.
  ibv_mr* crossing = reg(0, raw + 3 * page, 2 * page);
  EXPECT_NE(crossing, nullptr);
  EXPECT_EQ(raw[3 * page + 1], static_cast<uint8_t>((3 * page + 1) ^ ((3 * page + 1) >> 8)));
  if (crossing != nullptr) {
    EXPECT_EQ(ibv_dereg_mr(crossing), 0);
  }
  mrs_.clear();
  std::free(raw);
}

TEST_F(VerbsAbiTest, CompletionEventsBlockOrReportEagain) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_[0]);
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx_[0], 8, reinterpret_cast<void*>(0x1234), ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);
  ibv_cq* got = nullptr;
  void* context = nullptr;
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &got, &context), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK), 0);
  // A loopback QP pair on one daemon, its completions on the armed CQ.
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 4;
  ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_[0], &ia);
  ASSERT_NE(qp, nullptr);
  qps_.emplace_back(qp, 0);
  ASSERT_EQ(connect(qp, 0, qp), 0);
  std::vector<uint8_t> buf(64, 1);
  ibv_mr* mr = reg(0, buf.data(), buf.size());
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 8, mr->lkey};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf.data() + 32);
  wr.wr.rdma.rkey = mr->rkey;
  ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  ASSERT_EQ(ibv_get_cq_event(ch, &got, &context), 0);  // blocks until it comes
  EXPECT_EQ(got, cq);
  EXPECT_EQ(context, reinterpret_cast<void*>(0x1234));
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ibv_ack_cq_events(cq, 1);
  EXPECT_EQ(cq->comp_events_completed, 1u);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(VerbsAbiTest, SharedReceiveQueueFeedsEveryQpOnIt) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_[1], &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_GE(sa.attr.max_wr, 16u);
  ibv_qp* b1 = create_qp(1, srq);
  ibv_qp* b2 = create_qp(1, srq);
  ibv_qp* a1 = create_qp(0);
  ibv_qp* a2 = create_qp(0);
  ASSERT_TRUE(b1 && b2 && a1 && a2);
  ASSERT_EQ(connect(a1, 1, b1), 0);
  ASSERT_EQ(connect(b1, 0, a1), 0);
  ASSERT_EQ(connect(a2, 1, b2), 0);
  ASSERT_EQ(connect(b2, 0, a2), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
  std::vector<uint8_t> rbuf(256), sbuf(64, 9);
  ibv_mr* rmr = reg(1, rbuf.data(), rbuf.size());
  ibv_mr* smr = reg(0, sbuf.data(), sbuf.size());
  ASSERT_TRUE(rmr && smr);
  ibv_sge rs[2] = {{reinterpret_cast<uintptr_t>(rbuf.data()), 64, rmr->lkey},
                   {reinterpret_cast<uintptr_t>(rbuf.data() + 128), 64, rmr->lkey}};
  ibv_recv_wr rw[2]{};
  rw[0] = ibv_recv_wr{10, &rw[1], &rs[0], 1};
  rw[1] = ibv_recv_wr{11, nullptr, &rs[1], 1};
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq, &rw[0], &rbad), 0);
  ibv_sge ss{reinterpret_cast<uintptr_t>(sbuf.data()), 5, smr->lkey};
  for (ibv_qp* qp : {a1, a2}) {
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.sg_list = &ss;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    EXPECT_EQ(wait_wc(0).status, IBV_WC_SUCCESS);
  }
  const ibv_wc r1 = wait_wc(1), r2 = wait_wc(1);
  EXPECT_EQ(r1.wr_id, 10u);  // SRQ WQEs are taken in order
  EXPECT_EQ(r2.wr_id, 11u);
  EXPECT_EQ(r1.qp_num, b1->qp_num);
  EXPECT_EQ(r2.qp_num, b2->qp_num);
  for (auto& [qp, i] : qps_) EXPECT_EQ(ibv_destroy_qp(qp), 0);
  qps_.clear();
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(VerbsAbiTest, ADaemonThatDiesIsADeviceFatalErrorNotAHang) {
  ibv_qp* a = create_qp(0);
  ASSERT_NE(a, nullptr);
  daemons_[0].reset();  // the NIC is gone under the program
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx_[0], &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
  ibv_ack_async_event(&ev);
  ibv_wc wc{};
  EXPECT_LT(ibv_poll_cq(cq_[0], 1, &wc), 0);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx_[0], 1, &port), 0);
  EXPECT_EQ(port.state, IBV_PORT_DOWN);
  std::vector<uint8_t> buf(64);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 8, 0};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  EXPECT_NE(ibv_post_send(a, &wr, &bad), 0);
  // Everything can still be destroyed (TearDown).
}

}  // namespace

namespace {

// The calls that only compute, against rdma-core's own library (Debian's
// libibverbs1, loaded beside Ferry's by its path): the same answer for
// every input, including the ones neither names.
TEST(VerbsAbiConformance, PureCallsAnswerAsRdmaCoresLibrary) {
  void* real = nullptr;
  for (const char* path :
       {"/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib64/libibverbs.so.1", "/usr/lib/libibverbs.so.1"}) {
    real = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (real != nullptr) break;
  }
  if (real == nullptr) GTEST_SKIP() << "rdma-core's libibverbs.so.1 is not installed (libibverbs1)";
  auto sym = [&](const char* name) {
    void* f = dlsym(real, name);
    EXPECT_NE(f, nullptr) << name;
    return f;
  };
  auto rate_to_mult = reinterpret_cast<int (*)(ibv_rate)>(sym("ibv_rate_to_mult"));
  auto rate_to_mbps = reinterpret_cast<int (*)(ibv_rate)>(sym("ibv_rate_to_mbps"));
  auto from_mult = reinterpret_cast<ibv_rate (*)(int)>(sym("mult_to_ibv_rate"));
  auto from_mbps = reinterpret_cast<ibv_rate (*)(int)>(sym("mbps_to_ibv_rate"));
  auto wc_str = reinterpret_cast<const char* (*)(ibv_wc_status)>(sym("ibv_wc_status_str"));
  auto event_str = reinterpret_cast<const char* (*)(ibv_event_type)>(sym("ibv_event_type_str"));
  auto node_str = reinterpret_cast<const char* (*)(ibv_node_type)>(sym("ibv_node_type_str"));
  auto port_str = reinterpret_cast<const char* (*)(ibv_port_state)>(sym("ibv_port_state_str"));
  ASSERT_FALSE(HasFailure());
  ASSERT_NE(rate_to_mult, &ibv_rate_to_mult) << "the path loaded Ferry's library, not rdma-core's";
  std::vector<int> mbps_inputs = {-1, 0, 1, 2499, 2501, 1000000};
  for (int r = 0; r <= 31; ++r) {  // (an enum holds only the values its bits do)
    const auto rate = static_cast<ibv_rate>(r);
    EXPECT_EQ(ibv_rate_to_mult(rate), rate_to_mult(rate)) << "rate " << r;
    EXPECT_EQ(ibv_rate_to_mbps(rate), rate_to_mbps(rate)) << "rate " << r;
    mbps_inputs.push_back(rate_to_mbps(rate));
  }
  for (int m = -2; m <= 600; ++m) EXPECT_EQ(mult_to_ibv_rate(m), from_mult(m)) << "mult " << m;
  for (int mbps : mbps_inputs) EXPECT_EQ(mbps_to_ibv_rate(mbps), from_mbps(mbps)) << "mbps " << mbps;
  for (int s = 0; s <= 31; ++s) {
    EXPECT_STREQ(ibv_wc_status_str(static_cast<ibv_wc_status>(s)), wc_str(static_cast<ibv_wc_status>(s))) << s;
  }
  for (int e = 0; e <= 31; ++e) {
    EXPECT_STREQ(ibv_event_type_str(static_cast<ibv_event_type>(e)), event_str(static_cast<ibv_event_type>(e))) << e;
  }
  for (int n = -1; n <= 7; ++n) {
    EXPECT_STREQ(ibv_node_type_str(static_cast<ibv_node_type>(n)), node_str(static_cast<ibv_node_type>(n))) << n;
  }
  for (int p = 0; p <= 7; ++p) {
    EXPECT_STREQ(ibv_port_state_str(static_cast<ibv_port_state>(p)), port_str(static_cast<ibv_port_state>(p))) << p;
  }
  dlclose(real);
}

}  // namespace
