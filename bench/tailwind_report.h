// `ferry bench tailwind` (tailwind_bench.h), its report: each point's
// figures as JSON (and a row of text), where things ran, and the summary of
// the targets as ratios of the two systems in this run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tailwind_bench.h"
#include "tailwind_setup.h"

namespace ferry::bench::tailwind_bench {

struct Point {
  std::string experiment;
  std::string figure;
  std::string system;
  std::string workload;
  uint32_t clients = 0;                    // closed loop
  std::optional<double> offered_fraction;  // open loop: of the RPC peak
  double peak_mops = 0;
  uint32_t active = 0;  // primaries receiving requests
  Run run;
};

nlohmann::json point_json(const Point& p, const TailwindBenchOptions& o);

// Where things ran (every point's "placement"); `dir`: the backups' storage.
nlohmann::json placement(const TailwindBenchOptions& o, const std::string& dir);

// Where points go: JSON to `out` (with --json) and a row of text to the
// report, which is `log` with --json and `out` without.
class Emitter {
 public:
  Emitter(const TailwindBenchOptions& o, std::ostream& out, std::ostream& log, nlohmann::json place)
      : o_(o), out_(out), log_(log), place_(std::move(place)) {}
  // A measured point: its placement and provenance added, kept for the summary.
  void emit(nlohmann::json j);
  // Any other object (recovery, summary): JSON only.
  void raw(const nlohmann::json& j);
  const std::vector<nlohmann::json>& points() const { return points_; }
  const nlohmann::json& placement() const { return place_; }
  std::ostream& text() { return o_.json ? log_ : out_; }

 private:
  const TailwindBenchOptions& o_;
  std::ostream& out_;
  std::ostream& log_;
  nlohmann::json place_;
  std::vector<nlohmann::json> points_;
};

// The targets, as ratios of the two systems measured in this run.
void summarize(Emitter& em);

}  // namespace ferry::bench::tailwind_bench
