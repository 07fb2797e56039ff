// A Tailwind cluster in one process for tests: one primary NIC and several
// backup hosts, each with its own NIC, persistence domain (PM buffers),
// storage directory and RPC server, on one threaded engine.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ferry/nic/engine.h"
#include "ferry/pm/domain.h"
#include "ferry/rpc/server.h"
#include "ferry/tailwind/backup.h"
#include "ferry/tailwind/replicated_log.h"

namespace ferry::tailwind::testing {

inline std::string make_temp_dir(const char* tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / (std::string("ferry-tw-") + tag + "-XXXXXX")).string();
  char* dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  return pattern;
}

struct BackupHost {
  std::unique_ptr<pm::PersistenceDomain> domain;
  nic::Nic* nic = nullptr;
  std::unique_ptr<Backup> backup;
  std::unique_ptr<rpc::Server> server;
};

struct ClusterOptions {
  uint32_t backups = 4;
  size_t buffer_bytes = 1 << 20;  // at least the largest segment a test uses
  uint32_t buffers = 8;
  BufferMedia media = BufferMedia::kPm;
  // RPC workers driven by the test's pump thread (pause_backups()) instead
  // of their own threads.
  bool pumped_workers = false;
  // Pumped workers: the pump sleeps this long after each pass (slow backup
  // CPUs that keep answering).
  uint32_t pump_pass_sleep_us = 0;
  // Packet faults on the fabric every host shares (drop, duplicate, delay).
  nic::FaultModel faults;
  // The backups' storage speed (their unflushed limit) and flushing.
  uint64_t storage_write_mb_per_s = 500;
  uint32_t power_holdup_ms = 100;
  bool flush_in_background = false;
};

class Cluster {
 public:
  explicit Cluster(const ClusterOptions& o = {}) : options_(o) {
    dir_ = make_temp_dir("cluster");
    nic::EngineOptions eo;
    eo.faults = o.faults;
    engine_ = std::make_unique<nic::Engine>(eo);
    primary_nic_ = engine_->add_nic({.name = "primary"}).value();
    for (uint32_t i = 0; i < o.backups; ++i) {
      auto h = std::make_unique<BackupHost>();
      h->domain = std::make_unique<pm::PersistenceDomain>();
      nic::NicOptions no;
      no.name = "backup-" + std::to_string(i);
      no.memory = h->domain.get();
      h->nic = engine_->add_nic(no).value();
      BackupOptions bo;
      bo.name = no.name;
      bo.buffer_bytes = o.buffer_bytes;
      bo.buffers = o.buffers;
      bo.media = o.media;
      bo.pm_path = dir_ + "/" + no.name + ".pm";
      bo.storage_dir = dir_ + "/" + no.name + "-storage";
      bo.storage_write_mb_per_s = o.storage_write_mb_per_s;
      bo.power_holdup_ms = o.power_holdup_ms;
      bo.flush_in_background = o.flush_in_background;
      auto b = Backup::create(*h->nic, h->domain.get(), bo);
      EXPECT_TRUE(b.ok()) << b.status().to_string();
      h->backup = std::move(b).value();
      rpc::ServerOptions so;
      so.mode = rpc::Mode::kRawRpc;
      so.workers = 1;
      so.threaded = !o.pumped_workers;
      so.max_request_bytes = 8192;
      so.buffer_bytes = 16 << 10;
      so.max_response_bytes = 64 << 10;
      auto s = rpc::Server::create(*engine_, *h->nic, so);
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      h->server = std::move(s).value();
      EXPECT_TRUE(h->backup->register_rpcs(*h->server).ok());
      EXPECT_TRUE(h->server->start().ok());
      hosts_.push_back(std::move(h));
    }
    if (o.pumped_workers) {
      pump_ = std::thread([this] {
        while (!stop_pump_.load()) {
          if (paused_.load()) {
            std::this_thread::yield();
          } else {
            for (size_t i = 0; i < hosts_.size(); ++i) {
              if (static_cast<int>(i) != silenced_.load()) hosts_[i]->server->poll_worker(0);
              // silence_after_open(): stops right after the pass that served the open.
              if (static_cast<int>(i) == silence_after_open_.load() &&
                  hosts_[i]->backup->counters().opens > opens_before_silence_.load()) {
                silenced_ = static_cast<int>(i);
                silence_after_open_ = -1;
              }
            }
          }
          passes_.fetch_add(1);
          if (options_.pump_pass_sleep_us > 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(options_.pump_pass_sleep_us));
          }
        }
      });
    }
  }

  ~Cluster() {
    links_.clear();
    stop_pump_ = true;
    if (pump_.joinable()) pump_.join();
    for (auto& h : hosts_) h->server.reset();
    for (auto& h : hosts_) h->backup.reset();
    engine_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Links from the primary NIC to every backup, for `log_id`.
  std::vector<BackupLink*> link_all(uint64_t log_id, bool data_path) {
    std::vector<BackupLink*> out;
    for (auto& h : hosts_) {
      auto l = BackupLink::connect(*engine_, *primary_nic_, *h->backup, *h->server, log_id, data_path);
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      out.push_back(l->get());
      links_.push_back(std::move(l).value());
    }
    return out;
  }

  // Pumped workers only: the backups' CPUs stop (or resume) serving RPCs.
  // Returns once a pass of the pump that began before the call has ended,
  // so no RPC is served after pause_backups(true) returns.
  void pause_backups(bool paused) {
    if (!pump_.joinable()) {
      ADD_FAILURE() << "pause_backups needs ClusterOptions::pumped_workers";
      return;
    }
    paused_ = paused;
    // The pass under way now may have read the old flag; every later one
    // reads the new one.
    const uint64_t now = passes_.load();
    while (passes_.load() == now) std::this_thread::yield();
  }

  // Backup i's CPU stops for good (its process died) while its NIC still
  // acknowledges what arrives: requests are taken and never answered.
  void silence_backup(size_t i) {
    silenced_ = static_cast<int>(i);
    const uint64_t now = passes_.load();
    while (passes_.load() == now) std::this_thread::yield();
  }
  // The silenced backup's CPU runs again (it was only briefly unreachable):
  // the requests it took meanwhile are served, in order.
  void resume_backup() { silenced_ = -1; }
  // Backup i's CPU stops right after it serves its next open (the pump
  // checks after each of its polls): the open is answered, nothing after it.
  void silence_after_open(size_t i) {
    opens_before_silence_ = hosts_[i]->backup->counters().opens;
    silence_after_open_ = static_cast<int>(i);
  }

  nic::Engine& engine() { return *engine_; }
  nic::Nic& primary_nic() { return *primary_nic_; }
  BackupHost& host(size_t i) { return *hosts_[i]; }
  size_t size() const { return hosts_.size(); }
  const std::string& dir() const { return dir_; }

 private:
  ClusterOptions options_;
  std::string dir_;
  std::unique_ptr<nic::Engine> engine_;
  nic::Nic* primary_nic_ = nullptr;
  std::vector<std::unique_ptr<BackupHost>> hosts_;
  std::vector<std::unique_ptr<BackupLink>> links_;
  std::thread pump_;
  std::atomic<bool> stop_pump_{false};
  std::atomic<bool> paused_{false};
  std::atomic<int> silenced_{-1};  // a backup whose RPCs are never served
  std::atomic<int> silence_after_open_{-1};
  std::atomic<uint64_t> opens_before_silence_{0};
  std::atomic<uint64_t> passes_{0};  // passes of the pump completed
};

}  // namespace ferry::tailwind::testing
