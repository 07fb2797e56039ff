// EtcdStore's watches: one streaming POST /v3/watch per watch, on its own
// thread, reconnecting from the next undelivered revision when it breaks.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "etcd_gateway.h"
#include "etcd_http.h"
#include "ferry/common/assert.h"
#include "ferry/membership/etcd_store.h"

namespace ferry::membership {

namespace {

// How long one curl_multi_poll sleeps at most; cancel() wakes it earlier.
constexpr int kPollTimeoutMs = 1'000;

// Shared by the watch handle and its thread (which may outlive the handle if
// the handle is destroyed from its own callback).
struct WatchState {
  WatchState(EtcdOptions options_in, KeySpan span_in, Revision next, WatchCallback callback_in)
      : options(std::move(options_in)),
        span(std::move(span_in)),
        callback(std::move(callback_in)),
        next_revision(next),
        multi(curl_multi_init()) {}
  ~WatchState() {
    if (multi != nullptr) curl_multi_cleanup(multi);
  }

  const EtcdOptions options;
  const KeySpan span;
  const WatchCallback callback;
  Revision next_revision;  // first revision not yet delivered; only the watch thread touches it

  CURLM* const multi;  // only the watch thread uses it, except curl_multi_wakeup (thread-safe)
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;  // backoff sleeps; wakes on cancel
};

// The watch whose thread this is (set by the watch thread for its whole
// life), so that cancel() from a callback does not join its own thread.
thread_local const WatchState* t_current_watch = nullptr;

class EtcdWatch final : public Watch {
 public:
  explicit EtcdWatch(std::shared_ptr<WatchState> state) : state_(std::move(state)) {
    thread_ = std::thread([state = state_] {
      t_current_watch = state.get();
      run(*state);
    });
  }
  ~EtcdWatch() override {
    cancel();
    if (thread_.joinable()) thread_.detach();  // only when destroyed by its own callback
  }

  void cancel() override {
    state_->cancelled.store(true, std::memory_order_release);
    {
      // Under mu so that a thread about to sleep in the backoff wait sees it.
      std::lock_guard lk(state_->mu);
    }
    state_->cv.notify_all();
    curl_multi_wakeup(state_->multi);
    if (thread_.joinable() && t_current_watch != state_.get()) thread_.join();
  }

 private:
  static void run(WatchState& state);
  // One connection: streams until it breaks, the watch ends, or cancel.
  // Returns true when the watch is over (terminal update delivered or cancelled).
  static bool stream_once(WatchState& state, bool* made_progress);

  std::shared_ptr<WatchState> state_;
  std::thread thread_;
};

bool deliver(WatchState& state, WatchUpdate update) {
  if (state.cancelled.load(std::memory_order_acquire)) return true;
  const bool terminal = !update.status.ok();
  state.callback(update);
  return terminal;
}

bool EtcdWatch::stream_once(WatchState& state, bool* made_progress) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return false;
  const std::string url = state.options.endpoint + "/v3/watch";
  const std::string body = etcd::encode_watch_create(state.span, state.next_revision);
  char error_buffer[CURL_ERROR_SIZE] = {};
  struct Sink {
    etcd::WatchStreamDecoder decoder;
    std::vector<etcd::WatchMessage> messages;
    Status error;
  } sink;
  auto write = +[](char* data, size_t size, size_t count, void* user) -> size_t {
    auto* s = static_cast<Sink*>(user);
    Status st = s->decoder.feed(std::string_view(data, size * count), &s->messages);
    if (!st.ok()) {
      s->error = std::move(st);
      return 0;  // abort the transfer
    }
    return size * count;
  };
  etcd::set_common_options(curl, state.options.connect_timeout_ms);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_multi_add_handle(state.multi, curl);

  bool over = false;
  int running = 1;
  while (!over && !state.cancelled.load(std::memory_order_acquire)) {
    if (curl_multi_perform(state.multi, &running) != CURLM_OK) break;
    if (running == 0) {
      // The response ended: a last unterminated message still counts.
      if (sink.error.ok()) {
        Status st = sink.decoder.finish(&sink.messages);
        if (!st.ok()) sink.error = std::move(st);
      }
    }
    for (etcd::WatchMessage& m : sink.messages) {
      if (over) break;
      *made_progress = true;
      if (state.next_revision == 0 && m.created) state.next_revision = m.header_revision + 1;
      if (m.canceled) {
        WatchUpdate end;
        end.status = m.compact_revision > 0
                         ? out_of_range("etcd compacted revision " + std::to_string(state.next_revision) +
                                        " (oldest kept: " + std::to_string(m.compact_revision) + ")")
                         : unavailable("etcd cancelled the watch: " + m.cancel_reason);
        over = deliver(state, std::move(end));
        break;
      }
      // After a reconnection etcd replays from next_revision; anything older
      // was delivered on the previous connection.
      std::erase_if(m.events, [&](const Event& e) { return e.revision() < state.next_revision; });
      if (m.events.empty()) continue;
      if (!std::is_sorted(m.events.begin(), m.events.end(),
                          [](const Event& a, const Event& b) { return a.revision() < b.revision(); })) {
        sink.error = unavailable("malformed etcd response: watch events out of revision order");
        break;
      }
      state.next_revision = m.events.back().revision() + 1;
      WatchUpdate update;
      update.events = std::move(m.events);
      over = deliver(state, std::move(update));
    }
    sink.messages.clear();
    if (!sink.error.ok() || running == 0) break;
    curl_multi_poll(state.multi, nullptr, 0, kPollTimeoutMs, nullptr);
  }

  // A gateway error object (not a transport problem) ends the watch: a
  // reconnection would get the same answer.
  if (!over && !sink.error.ok() && sink.error.code() != Code::kUnavailable) {
    WatchUpdate end;
    end.status = sink.error;
    over = deliver(state, std::move(end));
  }
  curl_multi_remove_handle(state.multi, curl);
  curl_easy_cleanup(curl);
  curl_slist_free_all(headers);
  return over || state.cancelled.load(std::memory_order_acquire);
}

void EtcdWatch::run(WatchState& state) {
  uint32_t backoff_ms = state.options.watch_retry_min_ms;
  for (;;) {
    bool made_progress = false;
    if (stream_once(state, &made_progress)) return;
    if (made_progress) backoff_ms = state.options.watch_retry_min_ms;
    std::unique_lock lk(state.mu);
    if (state.cv.wait_for(lk, std::chrono::milliseconds(backoff_ms),
                          [&] { return state.cancelled.load(std::memory_order_acquire); })) {
      return;
    }
    backoff_ms = std::min(backoff_ms * 2, state.options.watch_retry_max_ms);
  }
}

}  // namespace

Result<std::unique_ptr<Watch>> EtcdStore::watch(const KeySpan& span, Revision start_revision, WatchCallback callback) {
  if (start_revision < 0) return invalid_argument("negative start revision");
  if (!callback) return invalid_argument("watch without a callback");
  if (start_revision == 0) {
    // "From the next change" as of this call, not as of when the stream
    // reaches the server: pin the revision now.
    FERRY_ASSIGN_OR_RETURN(RangeResult now, get(KeySpan::exactly(span.key.empty() ? std::string(1, '\0') : span.key)));
    start_revision = now.revision + 1;
  }
  auto state = std::make_shared<WatchState>(options_, span, start_revision, std::move(callback));
  if (state->multi == nullptr) return resource_exhausted("curl_multi_init failed");
  return std::unique_ptr<Watch>(std::make_unique<EtcdWatch>(std::move(state)));
}

}  // namespace ferry::membership
