// libibverbs over the NIC daemon: the device list, contexts, queries,
// asynchronous events and the string helpers (docs/verbs-compat.md).
//
// Devices are the NIC daemons named by FERRY_NICD (socket paths separated
// by commas or colons; default /run/ferry/nicd.sock), listed as ferry0,
// ferry1, ... Each is one RoCE v2 port whose only GID is ::ffff:<the
// daemon's IPv4 address>.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ferry/common/checksum.h"
#include "ferry/nic/wqe.h"
#include "verbs_internal.h"

namespace ferry::verbs {

int errno_for(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return 0;
    case Code::kResourceExhausted:
      return ENOMEM;
    case Code::kUnavailable:
      return EIO;  // the device is gone
    case Code::kNotFound:
      return ENOENT;
    case Code::kPermissionDenied:
      return EACCES;
    case Code::kUnimplemented:
      return EOPNOTSUPP;
    case Code::kTimedOut:
      return ETIMEDOUT;
    default:
      return EINVAL;
  }
}

void debug_log(const std::string& what) {
  static const bool on = std::getenv("FERRY_VERBS_DEBUG") != nullptr;
  if (on) std::fprintf(stderr, "ferry libibverbs: %s\n", what.c_str());
}

namespace {

std::vector<std::string> socket_paths() {
  const char* env = std::getenv("FERRY_NICD");
  std::string list = env != nullptr && *env != '\0' ? env : std::string(nicd::kDefaultSocketPath);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = list.find_first_of(",:", start);
    const std::string path = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!path.empty()) out.push_back(path);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The devices, made once (as libibverbs scans sysfs once): ibv_device
// pointers stay valid for the life of the process, exit included (never
// destroyed).
std::vector<FerryDevice*>& all_devices() {
  static std::vector<FerryDevice*>& devices = *[] {
    auto* v = new std::vector<FerryDevice*>;
    for (const std::string& path : socket_paths()) {
      auto* d = new FerryDevice{};
      const int i = static_cast<int>(v->size());
      d->index = i;
      d->socket_path = path;
      d->dev.node_type = IBV_NODE_CA;
      d->dev.transport_type = IBV_TRANSPORT_IB;  // what RoCE devices report
      std::snprintf(d->dev.name, sizeof(d->dev.name), "ferry%d", i);
      std::snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
      std::snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", i);
      std::snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/ferry%d", i);
      // A GUID from the socket path, stable across runs, with the locally
      // administered bit set.
      const uint64_t h = checksum64({reinterpret_cast<const uint8_t*>(path.data()), path.size()});
      d->guid = htobe64((h & ~(0xFFull << 56)) | (0x02ull << 56));
      v->push_back(d);
    }
    return v;
  }();
  return devices;
}

bool is_socket(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

}  // namespace ferry::verbs

using namespace ferry;
using namespace ferry::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  std::vector<ibv_device*> found;
  for (FerryDevice* d : all_devices()) {
    if (is_socket(d->socket_path)) found.push_back(&d->dev);
  }
  auto** list = static_cast<ibv_device**>(std::calloc(found.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) return fail<ibv_device*>(ENOMEM);
  for (size_t i = 0; i < found.size(); ++i) list[i] = found[i];
  if (num_devices != nullptr) *num_devices = static_cast<int>(found.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) { std::free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

__be64 ibv_get_device_guid(ibv_device* device) { return reinterpret_cast<FerryDevice*>(device)->guid; }

int ibv_get_device_index(ibv_device* device) { return reinterpret_cast<FerryDevice*>(device)->index; }

ibv_context* ibv_open_device(ibv_device* device) {
  auto* d = reinterpret_cast<FerryDevice*>(device);
  nicd::OpenOptions options;
  options.socket_path = d->socket_path;
  options.client_name = program_invocation_short_name;
  Result<std::unique_ptr<nicd::Device>> opened = nicd::Device::open(options);
  if (!opened.ok()) {
    debug_log("ibv_open_device " + d->socket_path + ": " + opened.status().to_string());
    return fail<ibv_context>(ENODEV);
  }
  auto* c = new FerryContext{};
  c->device = std::move(*opened);
  c->nic = &c->device->nic();
  if (const auto ep = c->nic->udp_endpoint(); ep && ep->port != 0) c->udp_port = ep->port;
  ibv_context& ctx = c->ctx;
  ctx.device = device;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.post_srq_recv = post_srq_recv;
  ctx.cmd_fd = -1;
  // Nothing writes it: ibv_get_async_event polls the NIC (a program that
  // waits in poll(2) on it is not woken; docs/verbs-compat.md).
  ctx.async_fd = eventfd(0, EFD_CLOEXEC);
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = nullptr;  // not an extended verbs_context
  return &ctx;
}

int ibv_close_device(ibv_context* context) {
  FerryContext* c = ctx_of(context);
  if (c->objects.load() != 0) {
    // Objects still hold the daemon connection: closing it under them
    // would fail their destruction later. The context is left to the exit.
    debug_log("ibv_close_device with live objects: left open");
    return 0;
  }
  if (context->async_fd >= 0) close(context->async_fd);
  pthread_mutex_destroy(&context->mutex);
  delete c;
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  *attr = ibv_device_attr{};
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "ferry-nicd");
  attr->node_guid = reinterpret_cast<FerryDevice*>(context->device)->guid;
  attr->sys_image_guid = attr->node_guid;
  attr->max_mr_size = 1ull << 40;
  attr->page_size_cap = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  attr->hw_ver = 1;
  const nic::NicOptions limits;  // the daemon's NicOptions defaults (ferry nicd --max-qps)
  attr->max_qp = static_cast<int>(limits.max_qps);
  attr->max_qp_wr = 1 << 16;
  attr->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
  attr->max_sge = static_cast<int>(nic::kMaxSendSge);  // receives take kMaxRecvSge
  attr->max_sge_rd = static_cast<int>(nic::kMaxSendSge);
  attr->max_cq = static_cast<int>(limits.max_cqs);
  attr->max_cqe = 1 << 22;
  attr->max_mr = static_cast<int>(limits.max_mrs);
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->max_res_rd_atom = attr->max_qp * 16;
  attr->atomic_cap = IBV_ATOMIC_HCA;
  attr->max_srq = static_cast<int>(limits.max_srqs);
  attr->max_srq_wr = 1 << 16;
  attr->max_srq_sge = static_cast<int>(nic::kMaxRecvSge);
  attr->max_pkeys = 1;
  attr->local_ca_ack_delay = 0;
  attr->phys_port_cnt = 1;
  return 0;
}

// The legacy entry point; verbs.h's inline ibv_query_port passes a whole
// ibv_port_attr, which is what is filled.
int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* compat) {
  if (port_num != 1) return EINVAL;
  auto* attr = reinterpret_cast<ibv_port_attr*>(compat);
  FerryContext* c = ctx_of(context);
  *attr = ibv_port_attr{};
  attr->state = c->nic->alive() ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = mtu_enum(c->nic->max_path_mtu());
  attr->gid_tbl_len = 1;
  attr->max_msg_sz = 1u << 31;
  attr->pkey_tbl_len = 1;
  attr->active_width = 1;                      // 1X: notional, there is no link (docs/verbs-compat.md)
  attr->active_speed = 1;                      // SDR: notional
  attr->phys_state = c->nic->alive() ? 5 : 3;  // LinkUp : Disabled
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  const nic::Gid g = ctx_of(context)->nic->gid();
  std::memcpy(gid->raw, g.raw.data(), sizeof(gid->raw));
  return 0;
}

// IBVERBS_PRIVATE: enum ibv_gid_type_sysfs, 1 = RoCE v2.
int ibv_query_gid_type(ibv_context*, uint8_t port_num, unsigned int index, int* type) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = 1;
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
  if (flags != 0) return EINVAL;
  if (port_num != 1 || gid_index != 0) return ENODATA;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  fill_gid_entry(context, entry);
  return 0;
}

int ibv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xFFFF);
  return 0;
}

int ibv_get_pkey_index(ibv_context*, uint8_t port_num, __be16 pkey) {
  return port_num == 1 && (be16toh(pkey) & 0x7FFF) == 0x7FFF ? 0 : -1;
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  FerryContext* c = ctx_of(context);
  const bool nonblocking = (fcntl(context->async_fd, F_GETFL) & O_NONBLOCK) != 0;
  for (;;) {
    if (std::optional<nic::AsyncEvent> e = c->nic->poll_async_event()) {
      *event = ibv_async_event{};
      switch (e->type) {
        case nic::AsyncEventType::kCqError:
          event->event_type = IBV_EVENT_CQ_ERR;
          break;
        case nic::AsyncEventType::kQpFatal:
          event->event_type = IBV_EVENT_QP_FATAL;
          break;
        case nic::AsyncEventType::kSrqLimitReached:
          event->event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
          break;
        case nic::AsyncEventType::kQpLastWqeReached:
          event->event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
          break;
        case nic::AsyncEventType::kDeviceFatal:
          event->event_type = IBV_EVENT_DEVICE_FATAL;
          break;
      }
      // The object pointers are not tracked by number: the program gets the
      // event type; element.* is null except for the device event.
      event->element.port_num = 1;
      return 0;
    }
    if (nonblocking) {
      errno = EAGAIN;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ibv_ack_async_event(ibv_async_event*) {}

int ibv_fork_init(void) { return 0; }

ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

int ibv_read_sysfs_file(const char*, const char*, char*, size_t) { return -1; }

const char* ibv_get_sysfs_path(void) { return "/sys"; }

const char* ibv_node_type_str(ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    case IBV_NODE_USNIC:
      return "usNIC";
    case IBV_NODE_USNIC_UDP:
      return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  switch (port_state) {
    case IBV_PORT_NOP:
      return "no state change (NOP)";
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active defer";
  }
  return "unknown";
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const names[] = {"CQ error",
                                      "local work queue catastrophic error",
                                      "invalid request local work queue error",
                                      "local access violation work queue error",
                                      "communication established",
                                      "send queue drained",
                                      "path migrated",
                                      "path migration request error",
                                      "local catastrophic error",
                                      "port active",
                                      "port error",
                                      "LID change",
                                      "P_Key change",
                                      "SM change",
                                      "SRQ catastrophic error",
                                      "SRQ limit reached",
                                      "last WQE reached",
                                      "client reregistration",
                                      "GID table change",
                                      "WQ fatal"};
  const auto i = static_cast<size_t>(event);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const names[] = {"success",
                                      "local length error",
                                      "local QP operation error",
                                      "local EE context operation error",
                                      "local protection error",
                                      "Work Request Flushed Error",
                                      "memory management operation error",
                                      "bad response error",
                                      "local access error",
                                      "remote invalid request error",
                                      "remote access error",
                                      "remote operation error",
                                      "transport retry counter exceeded",
                                      "RNR retry counter exceeded",
                                      "local RDD violation error",
                                      "remote invalid RD request",
                                      "aborted error",
                                      "invalid EE context number",
                                      "invalid EE context state",
                                      "fatal error",
                                      "response timeout error",
                                      "general error",
                                      "TM error",
                                      "TM software rendezvous"};
  const auto i = static_cast<size_t>(status);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

}  // extern "C"
