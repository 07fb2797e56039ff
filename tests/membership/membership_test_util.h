// Helpers for the membership tests: collectors for watch events and views
// that a test can await (with a deadline that only bounds a failing test).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/membership/store.h"
#include "ferry/membership/view.h"

namespace ferry::membership::testing {

// Bounds every wait; a correct implementation answers well within it (etcd's
// lease expiry: TTL + its 500 ms expiry check).
inline constexpr std::chrono::seconds kAwaitBudget{20};

// A fresh number for each call in this process: one etcd serves every test
// of a process (and every --gtest_repeat round), so each test instance names
// its own keys and groups.
inline std::string unique_suffix() {
  static std::atomic<uint64_t> next{0};
  return std::to_string(next.fetch_add(1) + 1);
}

// Everything a watch delivered.
class EventLog {
 public:
  WatchCallback callback() {
    return [this](const WatchUpdate& u) {
      std::lock_guard lk(mu_);
      ++updates_;
      if (!u.status.ok()) end_ = u.status;
      events_.insert(events_.end(), u.events.begin(), u.events.end());
      cv_.notify_all();
    };
  }
  // Waits until pred(events) holds; false after kAwaitBudget.
  bool await(const std::function<bool(const std::vector<Event>&)>& pred) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kAwaitBudget, [&] { return pred(events_); });
  }
  bool await_count(size_t n) {
    return await([n](const std::vector<Event>& e) { return e.size() >= n; });
  }
  bool await_end() {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kAwaitBudget, [&] { return !end_.ok(); });
  }
  std::vector<Event> events() const {
    std::lock_guard lk(mu_);
    return events_;
  }
  size_t updates() const {
    std::lock_guard lk(mu_);
    return updates_;
  }
  Status end() const {
    std::lock_guard lk(mu_);
    return end_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
  size_t updates_ = 0;
  Status end_;
};

// Every view watch_view delivered.
class ViewLog {
 public:
  std::function<void(const View&)> callback() {
    return [this](const View& v) {
      std::lock_guard lk(mu_);
      views_.push_back(v);
      cv_.notify_all();
    };
  }
  bool await(const std::function<bool(const View&)>& pred) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, kAwaitBudget, [&] { return !views_.empty() && pred(views_.back()); });
  }
  std::vector<View> views() const {
    std::lock_guard lk(mu_);
    return views_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<View> views_;
};

inline std::vector<std::string> ids(const View& v) {
  std::vector<std::string> out;
  for (const ViewMember& m : v.members) out.push_back(m.id);
  return out;
}

inline std::string keys_of(const std::vector<Event>& events) {
  std::string out;
  for (const Event& e : events) {
    out += (e.type == Event::Type::kPut ? "put " : "del ") + e.kv.key + "@" + std::to_string(e.revision()) + "; ";
  }
  return out;
}

// Views delivered in order must be versions v, v+1, v+2, ... with none twice.
inline ::testing::AssertionResult versions_are_consecutive(const std::vector<View>& views) {
  for (size_t i = 1; i < views.size(); ++i) {
    if (views[i].version != views[i - 1].version + 1) {
      return ::testing::AssertionFailure()
             << "view " << views[i - 1].version << " followed by view " << views[i].version;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ferry::membership::testing
