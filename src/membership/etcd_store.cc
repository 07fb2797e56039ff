// EtcdStore's unary requests: one POST per operation on a pooled connection.
#include "ferry/membership/etcd_store.h"

#include <mutex>
#include <string_view>
#include <utility>

#include "etcd_gateway.h"
#include "etcd_http.h"

namespace ferry::membership {

namespace etcd {

void ensure_curl_initialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Status transfer_failure(CURLcode code, const std::string& url, const char* error_buffer) {
  std::string detail = error_buffer != nullptr && error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  std::string message = "etcd at " + url + ": " + detail;
  if (code == CURLE_OPERATION_TIMEDOUT) return timed_out(std::move(message));
  if (code == CURLE_WRITE_ERROR) return unavailable(message + " (response larger than the limit)");
  return unavailable(std::move(message));
}

size_t append_to_string(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::string*>(user);
  const size_t bytes = size * count;
  if (out->size() + bytes > kResponseBytesMax) return 0;  // curl fails the transfer with CURLE_WRITE_ERROR
  out->append(data, bytes);
  return bytes;
}

void set_common_options(CURL* curl, uint32_t connect_timeout_ms) {
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  // The gateway speaks HTTP/1.1; never follow redirects to somewhere else.
  curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
}

}  // namespace etcd

namespace {

// The pool keeps at most this many idle connections.
constexpr size_t kIdleHandlesMax = 8;

Status check_endpoint(std::string_view endpoint) {
  constexpr std::string_view kScheme = "http://";
  if (endpoint.substr(0, kScheme.size()) != kScheme || endpoint.size() == kScheme.size()) {
    return invalid_argument("etcd endpoint must be http://HOST:PORT, not '" + std::string(endpoint) + "'");
  }
  const std::string_view authority = endpoint.substr(kScheme.size());
  if (authority.find_first_of("/?# ") != std::string_view::npos) {
    return invalid_argument("etcd endpoint must be http://HOST:PORT without a path, not '" + std::string(endpoint) +
                            "'");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<EtcdStore>> EtcdStore::create(EtcdOptions options) {
  FERRY_RETURN_IF_ERROR(check_endpoint(options.endpoint));
  if (options.request_timeout_ms == 0 || options.connect_timeout_ms == 0) {
    return invalid_argument("etcd timeouts must be positive");
  }
  etcd::ensure_curl_initialized();
  return std::unique_ptr<EtcdStore>(new EtcdStore(std::move(options)));
}

EtcdStore::EtcdStore(EtcdOptions options) : options_(std::move(options)) {}

EtcdStore::~EtcdStore() {
  for (void* handle : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

void* EtcdStore::take_handle() {
  {
    std::lock_guard lk(handles_mu_);
    if (!idle_handles_.empty()) {
      void* handle = idle_handles_.back();
      idle_handles_.pop_back();
      return handle;
    }
  }
  return curl_easy_init();
}

void EtcdStore::return_handle(void* handle) {
  {
    std::lock_guard lk(handles_mu_);
    if (idle_handles_.size() < kIdleHandlesMax) {
      idle_handles_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

Result<std::string> EtcdStore::request(const char* path, const std::string* body) {
  CURL* curl = static_cast<CURL*>(take_handle());
  if (curl == nullptr) return resource_exhausted("curl_easy_init failed");
  // Reset keeps the connection cache; the options are set again below.
  curl_easy_reset(curl);
  const std::string url = options_.endpoint + path;
  std::string response;
  char error_buffer[CURL_ERROR_SIZE] = {};
  etcd::set_common_options(curl, options_.connect_timeout_ms);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_ms));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &etcd::append_to_string);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_slist* headers = nullptr;
  if (body != nullptr) {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode code = curl_easy_perform(curl);
  long http_status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http_status);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  if (code != CURLE_OK) {
    // The connection may be in any state: do not reuse it.
    curl_easy_cleanup(curl);
    return etcd::transfer_failure(code, url, error_buffer);
  }
  return_handle(curl);
  if (http_status != 200) return etcd::decode_error(http_status, response);
  return response;
}

Result<std::string> EtcdStore::post(const char* path, const std::string& body) { return request(path, &body); }

Status EtcdStore::health() {
  FERRY_ASSIGN_OR_RETURN(std::string body, request("/health", nullptr));
  if (body.find("\"health\":\"true\"") == std::string::npos) {
    return unavailable("etcd at " + options_.endpoint + " is not healthy: " + body.substr(0, 200));
  }
  return ok_status();
}

Result<Revision> EtcdStore::put(const std::string& key, const std::string& value, LeaseId lease) {
  if (key.empty()) return invalid_argument("empty key");
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/put", etcd::encode_put(key, value, lease)));
  return etcd::decode_put(body);
}

Result<RangeResult> EtcdStore::get(const KeySpan& span) {
  if (span.key.empty() && !span.is_prefix) return invalid_argument("empty key");
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/range", etcd::encode_range(span)));
  return etcd::decode_range(body);
}

Result<DeleteResult> EtcdStore::erase(const KeySpan& span) {
  if (span.key.empty() && !span.is_prefix) return invalid_argument("empty key");
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/kv/deleterange", etcd::encode_delete(span)));
  return etcd::decode_delete(body);
}

Result<TxnResult> EtcdStore::compare_and_swap(const std::string& compare_key, Revision expected_mod_revision,
                                              const Mutation& effect) {
  if (compare_key.empty() || effect.key.empty()) return invalid_argument("empty key");
  FERRY_ASSIGN_OR_RETURN(std::string body,
                         post("/v3/kv/txn", etcd::encode_cas(compare_key, expected_mod_revision, effect)));
  return etcd::decode_txn(body);
}

Result<Lease> EtcdStore::grant_lease(int64_t ttl_seconds) {
  if (ttl_seconds <= 0 || ttl_seconds > 9'000'000'000) {
    return invalid_argument("lease TTL must be 1 .. 9e9 seconds, not " + std::to_string(ttl_seconds));
  }
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/grant", etcd::encode_lease_grant(ttl_seconds)));
  return etcd::decode_lease_grant(body);
}

Result<int64_t> EtcdStore::keep_alive(LeaseId lease) {
  // The keep-alive RPC is a stream; the gateway answers one request body with
  // one message and ends the response.
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/keepalive", etcd::encode_lease_id(lease)));
  return etcd::decode_keep_alive(body);
}

Status EtcdStore::revoke_lease(LeaseId lease) {
  FERRY_ASSIGN_OR_RETURN(std::string body, post("/v3/lease/revoke", etcd::encode_lease_id(lease)));
  return etcd::decode_put(body).status();
}

}  // namespace ferry::membership
