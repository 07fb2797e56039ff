// libmlx5.so.1 for Ferry's libibverbs: perftest links mlx5dv_* with
// BIND_NOW, so it loads only if these are defined. A Ferry device is no
// mlx5 device: each call fails as mlx5dv does for a device of another
// provider (EOPNOTSUPP; NULL with errno set).
#include <infiniband/mlx5dv.h>

#include <cerrno>

extern "C" {

ibv_qp* mlx5dv_create_qp(ibv_context*, ibv_qp_init_attr_ex*, mlx5dv_qp_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_context* mlx5dv_open_device(ibv_device*, mlx5dv_context_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_devx_general_cmd(ibv_context*, const void*, size_t, void*, size_t) { return EOPNOTSUPP; }

mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_destroy_mkey(mlx5dv_mkey*) { return EOPNOTSUPP; }

mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_crypto_login(ibv_context*, mlx5dv_crypto_login_attr*) { return EOPNOTSUPP; }

mlx5dv_dek* mlx5dv_dek_create(ibv_context*, mlx5dv_dek_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int mlx5dv_dek_destroy(mlx5dv_dek*) { return EOPNOTSUPP; }

}  // extern "C"
