// libcurl plumbing shared by the etcd requests (etcd_store.cc) and watch
// streams (etcd_watch.cc). Internal to the membership layer.
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <string>

#include "ferry/common/status.h"

namespace ferry::membership::etcd {

// Largest response body accepted from the gateway: etcd's own request limit
// is 1.5 MiB, so anything near this is not etcd talking.
constexpr size_t kResponseBytesMax = 64u << 20;

// curl_global_init, once per process (it is not thread-safe before 7.84).
void ensure_curl_initialized();

// The Status for a failed transfer to `url`: timed_out for a timeout,
// unavailable otherwise, with curl's explanation.
Status transfer_failure(CURLcode code, const std::string& url, const char* error_buffer);

// A CURLOPT_WRITEFUNCTION that appends to the std::string in `user` and
// aborts the transfer past kResponseBytesMax.
size_t append_to_string(char* data, size_t size, size_t count, void* user);

// Options every handle gets: no signals (threads), timeouts, keep-alive.
void set_common_options(CURL* curl, uint32_t connect_timeout_ms);

}  // namespace ferry::membership::etcd
