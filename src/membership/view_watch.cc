// watch_view: the current view, then each later one in version order.
#include <mutex>
#include <utility>

#include "ferry/membership/view.h"

namespace ferry::membership {

namespace {

class StoreViewWatch final : public ViewWatch {
 public:
  explicit StoreViewWatch(std::function<void(const View&)> on_view) : on_view_(std::move(on_view)) {}
  ~StoreViewWatch() override { cancel(); }

  void cancel() override { watch_.reset(); }

  Status status() const override {
    std::lock_guard lk(mu_);
    return status_;
  }

  // Delivers `view` if it is newer than the last one delivered. Runs on one
  // thread at a time: the caller of watch_view, then the watch thread.
  void offer(const View& view) {
    if (view.version <= last_version_) return;
    last_version_ = view.version;
    on_view_(view);
  }

  void on_update(const WatchUpdate& update) {
    if (!update.status.ok()) {
      std::lock_guard lk(mu_);
      status_ = update.status;
      return;
    }
    for (const Event& e : update.events) {
      // A deleted view key (an operator reset the group) carries no view.
      if (e.type != Event::Type::kPut) continue;
      Result<View> view = decode_view(e.kv.value);
      if (view.ok()) offer(view.value());
    }
  }

  std::unique_ptr<Watch> watch_;

 private:
  const std::function<void(const View&)> on_view_;
  uint64_t last_version_ = 0;
  mutable std::mutex mu_;
  Status status_;  // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<ViewWatch>> watch_view(MembershipStore* store, const GroupPath& group,
                                              std::function<void(const View&)> on_view) {
  FERRY_RETURN_IF_ERROR(group.validate());
  if (!on_view) return invalid_argument("watch_view without a callback");
  auto handle = std::make_unique<StoreViewWatch>(std::move(on_view));
  const std::string key = group.view_key();
  FERRY_ASSIGN_OR_RETURN(RangeResult now, store->get(KeySpan::exactly(key)));
  if (!now.kvs.empty()) {
    Result<View> view = decode_view(now.kvs.front().value);
    if (view.ok()) handle->offer(view.value());
  }
  // From the revision after the read: no view between the two is missed.
  StoreViewWatch* raw = handle.get();
  FERRY_ASSIGN_OR_RETURN(handle->watch_, store->watch(KeySpan::exactly(key), now.revision + 1,
                                                      [raw](const WatchUpdate& u) { raw->on_update(u); }));
  return std::unique_ptr<ViewWatch>(std::move(handle));
}

}  // namespace ferry::membership
