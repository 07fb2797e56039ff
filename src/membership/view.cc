// Key layout, the view and member value formats, and the view transition.
#include "ferry/membership/view.h"

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace ferry::membership {

namespace {

using json = nlohmann::json;

constexpr size_t kNameBytesMax = 128;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == ':' || c == '@' || c == '-';
}

Status corrupt_view(std::string_view what) { return data_loss("malformed view: " + std::string(what)); }

}  // namespace

Status validate_name(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > kNameBytesMax || !std::all_of(name.begin(), name.end(), name_char)) {
    return invalid_argument(std::string(what) + " must be 1..128 characters of [A-Za-z0-9._:@-], not '" +
                            std::string(name.substr(0, kNameBytesMax)) + "'");
  }
  return ok_status();
}

Status GroupPath::validate() const {
  FERRY_RETURN_IF_ERROR(validate_name("cluster name", cluster));
  return validate_name("group name", group);
}

std::string GroupPath::prefix() const { return "/ferry/" + cluster + "/groups/" + group + "/"; }
std::string GroupPath::members_prefix() const { return prefix() + "members/"; }
std::string GroupPath::member_key(std::string_view id) const { return members_prefix() + std::string(id); }
std::string GroupPath::view_key() const { return prefix() + "view"; }
std::string GroupPath::to_string() const { return cluster + "/" + group; }

int View::position(std::string_view id, Revision incarnation) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].id == id && members[i].incarnation == incarnation) return static_cast<int>(i);
  }
  return -1;
}

std::string encode_view(const View& view) {
  json members = json::array();
  for (const ViewMember& m : view.members) {
    members.push_back({{"id", m.id}, {"address", m.address}, {"incarnation", m.incarnation}});
  }
  // error_handler::replace: an address is opaque and need not be UTF-8; dump
  // would otherwise throw on it.
  return json{{"version", view.version}, {"members", std::move(members)}}.dump(-1, ' ', false,
                                                                               json::error_handler_t::replace);
}

Result<View> decode_view(std::string_view value) {
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt_view("not a JSON object");
  auto version = j.find("version");
  if (version == j.end() || !version->is_number_unsigned() || version->get<uint64_t>() == 0) {
    return corrupt_view("'version' is not a positive integer");
  }
  View view;
  view.version = version->get<uint64_t>();
  auto members = j.find("members");
  if (members == j.end() || !members->is_array()) return corrupt_view("'members' is not an array");
  std::set<std::string> ids;
  for (const json& m : *members) {
    if (!m.is_object()) return corrupt_view("a member is not an object");
    auto id = m.find("id");
    auto address = m.find("address");
    auto incarnation = m.find("incarnation");
    if (id == m.end() || !id->is_string() || address == m.end() || !address->is_string() || incarnation == m.end() ||
        !incarnation->is_number_unsigned()) {
      return corrupt_view("a member lacks a string id, a string address or an integer incarnation");
    }
    ViewMember member;
    member.id = id->get<std::string>();
    member.address = address->get<std::string>();
    const uint64_t inc = incarnation->get<uint64_t>();
    if (inc == 0 || inc > static_cast<uint64_t>(std::numeric_limits<Revision>::max())) {
      return corrupt_view("member incarnation out of range");
    }
    member.incarnation = static_cast<Revision>(inc);
    if (!validate_name("member id", member.id).ok()) return corrupt_view("invalid member id");
    if (!ids.insert(member.id).second) return corrupt_view("member '" + member.id + "' appears twice");
    view.members.push_back(std::move(member));
  }
  return view;
}

std::string encode_member_value(std::string_view address) {
  return json{{"address", std::string(address)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<std::string> decode_member_address(std::string_view value) {
  json j = json::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("member value is not a JSON object");
  auto address = j.find("address");
  if (address == j.end() || !address->is_string()) return data_loss("member value has no string 'address'");
  return address->get<std::string>();
}

View plan_next_view(const View& current, const std::vector<ViewMember>& live) {
  std::map<std::string_view, const ViewMember*> live_by_id;
  for (const ViewMember& m : live) live_by_id.emplace(m.id, &m);

  View next;
  std::set<std::string_view> kept;
  // Survivors keep their order (their place in the chain)...
  for (const ViewMember& m : current.members) {
    auto it = live_by_id.find(m.id);
    if (it == live_by_id.end() || it->second->incarnation != m.incarnation) continue;
    next.members.push_back(*it->second);  // the address as the member last published it
    kept.insert(m.id);
  }
  // ...and newcomers join at the tail in the order they joined (ties, which
  // one transaction cannot produce, by id).
  std::vector<const ViewMember*> newcomers;
  for (const ViewMember& m : live) {
    if (!kept.contains(m.id)) newcomers.push_back(&m);
  }
  std::sort(newcomers.begin(), newcomers.end(), [](const ViewMember* a, const ViewMember* b) {
    return a->incarnation != b->incarnation ? a->incarnation < b->incarnation : a->id < b->id;
  });
  for (const ViewMember* m : newcomers) next.members.push_back(*m);

  if (next.members == current.members) return current;
  next.version = current.version + 1;
  return next;
}

}  // namespace ferry::membership
