// open_store: the endpoint string picks the implementation.
#include "ferry/membership/store.h"

#include "ferry/membership/etcd_store.h"
#include "ferry/membership/in_process_store.h"

namespace ferry::membership {

Result<std::unique_ptr<MembershipStore>> open_store(std::string_view endpoint) {
  if (endpoint.empty() || endpoint == "inproc") {
    return std::unique_ptr<MembershipStore>(std::make_unique<InProcessStore>());
  }
  EtcdOptions options;
  constexpr std::string_view kEtcdScheme = "etcd://";
  if (endpoint.substr(0, kEtcdScheme.size()) == kEtcdScheme) {
    options.endpoint = "http://" + std::string(endpoint.substr(kEtcdScheme.size()));
  } else {
    options.endpoint = std::string(endpoint);
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::create(std::move(options)));
  // Fail at startup, with the endpoint in the message, rather than at the
  // first membership change.
  FERRY_RETURN_IF_ERROR(store->health());
  return std::unique_ptr<MembershipStore>(std::move(store));
}

}  // namespace ferry::membership
