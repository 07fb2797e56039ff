// libefa.so.1 for Ferry's libibverbs: perftest links efadv_* with
// BIND_NOW. A Ferry device is no EFA device: each call fails as efadv does
// for a device of another provider.
#include <infiniband/efadv.h>

#include <cerrno>

extern "C" {

ibv_qp* efadv_create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*, efadv_qp_init_attr*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int efadv_query_device(ibv_context*, efadv_device_attr*, uint32_t) { return EOPNOTSUPP; }

}  // extern "C"
