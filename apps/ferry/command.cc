#include "command.h"

namespace ferry::apps {

int Commands::run_parsed() const {
  for (const auto& [command, run] : entries_) {
    if (command->parsed()) return run();
  }
  return 0;
}

void add_member_flags(CLI::App* command, MemberFlags& flags, const MemberFlagHelp& help) {
  command->add_option("--config", flags.config, help.config)->required()->check(CLI::ExistingFile);
  if (help.nicd != nullptr) command->add_option("--nicd", flags.nicd, help.nicd);
  if (help.listen != nullptr) command->add_option("--listen", flags.listen, help.listen);
  if (help.region != nullptr) command->add_option("--region", flags.region, help.region);
  if (help.dir != nullptr) command->add_option("--dir", flags.dir, help.dir);
}

void QuickSettings::add_flag(CLI::App* command, const std::string& description) {
  command->add_flag("--quick", quick_, description);
}

CLI::Option* QuickSettings::operator()(CLI::Option* option, std::function<void()> apply) {
  settings_.emplace_back(option, std::move(apply));
  return option;
}

void QuickSettings::apply() const {
  if (!quick_) return;
  for (const auto& [option, apply] : settings_) {
    if (option->count() == 0) apply();
  }
}

}  // namespace ferry::apps
