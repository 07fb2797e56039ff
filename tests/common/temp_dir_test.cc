// make_temp_dir / make_temp_file: always a new entry, never one that exists,
// and errors that name the path.
#include "ferry/common/temp_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace ferry {
namespace {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = make_temp_dir("ferry-temp-dir-test");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    base_ = d.value();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(base_, ec);
  }
  std::string base_;
};

TEST_F(TempDirTest, EveryCallMakesANewEmptyDirectoryUnderTheBase) {
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    auto d = make_temp_dir(base_, "run");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_TRUE(seen.insert(d.value()).second) << d.value() << " twice";
    EXPECT_EQ(std::filesystem::path(d.value()).parent_path(), std::filesystem::path(base_));
    EXPECT_EQ(std::filesystem::path(d.value()).filename().string().rfind("run-", 0), 0u) << d.value();
    EXPECT_TRUE(std::filesystem::is_empty(d.value()));
    struct stat st {};
    ASSERT_EQ(::stat(d.value().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << "private to its owner";
  }
}

TEST_F(TempDirTest, AFileIsNewAndEmptyEvenBesideFilesWithBytesIn) {
  // Files a dead process left, with bytes in them.
  for (int i = 0; i < 50; ++i) std::ofstream(base_ + "/stale-" + std::to_string(i) + ".pm") << "old bytes";
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    auto f = make_temp_file(base_, "stale", ".pm");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_TRUE(seen.insert(f.value()).second);
    EXPECT_TRUE(f.value().ends_with(".pm")) << f.value();
    EXPECT_EQ(std::filesystem::file_size(f.value()), 0u) << f.value();
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(base_), {}), 70);
}

TEST_F(TempDirTest, AMissingOrUnwritableBaseIsAnErrorNamingThePath) {
  auto missing = make_temp_dir(base_ + "/no/such", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(base_ + "/no/such/x-"), std::string::npos) << missing.status().message();
  auto file = make_temp_file(base_ + "/no/such", "x", ".pm");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), Code::kNotFound);
  // A regular file where the base directory should be.
  std::ofstream(base_ + "/plain") << "x";
  EXPECT_EQ(make_temp_dir(base_ + "/plain", "x").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ferry
