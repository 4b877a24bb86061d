// io/durable_file.h: the one durable-write helper (setup's manifests, the CLI's output files,
// make-model's staged files, convert-spine-int8). Checks what a crash would observe: before the
// rename the final name still holds the old file and the complete new bytes sit under the temp
// name; after it the temp name is gone; a failed write leaves neither a temp file nor a change.
#include "io/durable_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace deltafin {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("df_durable_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(DurableFileTest, ReplacesThroughTempFileAndHookSeesTheCrashWindow) {
  const std::string path = (dir_ / "a.json").string();
  ASSERT_TRUE(WriteFileDurably(path, std::string_view("old\n")).ok());
  EXPECT_EQ(ReadAll(path), "old\n");

  int calls = 0;
  DurableWriteOptions options;
  options.before_rename = [&](const std::string& p) {
    ++calls;
    EXPECT_EQ(p, path);
    EXPECT_EQ(ReadAll(path), "old\n");            // the final name is untouched so far
    EXPECT_EQ(ReadAll(path + ".tmp"), "new!\n");  // and the new bytes are complete
  };
  ASSERT_TRUE(WriteFileDurably(path, std::string_view("new!\n"), options).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ReadAll(path), "new!\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(DurableFileTest, SuffixAndModeAreHonoured) {
  const std::string path = (dir_ / "secret").string();
  DurableWriteOptions options;
  options.mode = 0600;
  options.temp_suffix = ".partial";
  options.before_rename = [&](const std::string&) {
    EXPECT_TRUE(fs::exists(path + ".partial"));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  };
  ASSERT_TRUE(WriteFileDurably(path, std::string_view("t"), options).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DurableFileTest, FailureNamesThePathAndLeavesNothing) {
  const std::string path = (dir_ / "missing" / "a.bin").string();
  const Status st = WriteFileDurably(path, std::string_view("x"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path + ".tmp"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(path));

  // A rename onto a directory fails after the temp file is written: the temp file is removed.
  const std::string onto_dir = (dir_ / "d").string();
  fs::create_directories(dir_ / "d" / "child");
  const Status st2 = WriteFileDurably(onto_dir, std::string_view("x"));
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("cannot rename into place"), std::string::npos) << st2.message();
  EXPECT_FALSE(fs::exists(onto_dir + ".tmp"));
}

TEST_F(DurableFileTest, AppendAndSync) {
  const std::string path = (dir_ / "log.jsonl").string();
  ASSERT_TRUE(AppendFileDurably(path, "{\"a\":1}\n").ok());
  ASSERT_TRUE(AppendFileDurably(path, "{\"b\":2}\n").ok());
  EXPECT_EQ(ReadAll(path), "{\"a\":1}\n{\"b\":2}\n");
  EXPECT_TRUE(SyncPath(path).ok());
  EXPECT_TRUE(SyncPath(dir_.string()).ok());
  EXPECT_FALSE(SyncPath((dir_ / "nope").string()).ok());
  EXPECT_FALSE(AppendFileDurably((dir_ / "nope" / "x").string(), "y").ok());
}

}  // namespace
}  // namespace deltafin
