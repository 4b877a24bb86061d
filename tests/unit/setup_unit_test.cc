// Unit tests of the setup and net modules' pure parts: file names from the hub, the revision
// API's JSON, URL origins and redirects, token sources, hashes, the expert log's crash rules.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "net/hf_hub.h"
#include "net/http_client.h"
#include "setup/expert_log.h"
#include "setup/hash.h"
#include "setup/shard_layout.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("deltafin_setup_unit_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(RepoPath, AcceptsOrdinaryNamesAndRefusesEscapes) {
  EXPECT_TRUE(net::CheckRepoPath("config.json").ok());
  EXPECT_TRUE(net::CheckRepoPath("original/model-00001-of-000096.safetensors").ok());
  for (const std::string bad :
       {"", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a\\b", ".deltafin/manifest.json",
        "x.safetensors.partial", "x.partial.etag", "a\nb"}) {
    const Status s = net::CheckRepoPath(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("refusing file name"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(net::CheckRepoId("moonshotai/Kimi-K3").ok());
  EXPECT_FALSE(net::CheckRepoId("moonshotai").ok());
  EXPECT_FALSE(net::CheckRepoId("a/b/c").ok());
  EXPECT_FALSE(net::CheckRepoId("../b").ok());
  EXPECT_FALSE(net::CheckRevision("main branch").ok());
}

TEST(RevisionJson, ParsesSizesShasAndRefusesBadListings) {
  const std::string sha(40, 'a'), lfs(64, 'b');
  auto info = net::ParseRevisionJson(
      R"({"sha":")" + sha + R"(","siblings":[{"rfilename":"config.json","size":12,"blobId":")" +
          std::string(40, 'c') + R"("},{"rfilename":"m.safetensors","size":99,"lfs":{"sha256":")" +
          lfs + R"(","size":99}}]})",
      "api");
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->commit, sha);
  ASSERT_EQ(info->files.size(), 2u);
  EXPECT_EQ(info->files[0].blob_id, std::string(40, 'c'));
  EXPECT_EQ(info->files[1].sha256, lfs);
  EXPECT_EQ(info->files[1].size, 99u);
  // No sizes (the API was asked without ?blobs=true), a traversal, a size disagreement.
  EXPECT_FALSE(
      net::ParseRevisionJson(R"({"sha":")" + sha + R"(","siblings":[{"rfilename":"a"}]})", "api")
          .ok());
  auto evil = net::ParseRevisionJson(
      R"({"sha":")" + sha + R"(","siblings":[{"rfilename":"../a","size":1}]})", "api");
  ASSERT_FALSE(evil.ok());
  EXPECT_NE(evil.status().message().find("'..'"), std::string::npos);
  EXPECT_FALSE(
      net::ParseRevisionJson(R"({"sha":")" + sha +
                                 R"(","siblings":[{"rfilename":"a","size":1,"lfs":{"sha256":")" +
                                 lfs + R"(","size":2}}]})",
                             "api")
          .ok());
  EXPECT_FALSE(net::ParseRevisionJson("not json", "api").ok());
}

TEST(Urls, OriginsAndRedirects) {
  using net::HttpClient;
  EXPECT_EQ(HttpClient::Origin("https://huggingface.co/api/x"), "https://huggingface.co:443");
  EXPECT_EQ(HttpClient::Origin("http://127.0.0.1:8080/a"), "http://127.0.0.1:8080");
  EXPECT_EQ(HttpClient::Origin("HTTP://Host.Example"), "http://host.example:80");
  EXPECT_EQ(HttpClient::Origin("http://user@evil.com:81/"), "http://evil.com:81");
  // Same host, another port or scheme: another origin (the token must not go there).
  EXPECT_NE(HttpClient::Origin("http://127.0.0.1:8080/"),
            HttpClient::Origin("http://127.0.0.1:8081/"));
  EXPECT_NE(HttpClient::Origin("https://hf.co/"), HttpClient::Origin("http://hf.co/"));
  EXPECT_EQ(HttpClient::Origin("ftp://x/"), "");
  EXPECT_EQ(HttpClient::ResolveLocation("http://a:1/x/y?q", "/z"), "http://a:1/z");
  EXPECT_EQ(HttpClient::ResolveLocation("http://a:1/x/y", "z"), "http://a:1/x/z");
  EXPECT_EQ(HttpClient::ResolveLocation("https://a/x", "//cdn/f"), "https://cdn/f");
  EXPECT_EQ(HttpClient::ResolveLocation("http://a/x", "http://b/f"), "http://b/f");
  EXPECT_EQ(net::ResolveUrl("http://h", "o/n", "main", "dir/a b.json"),
            "http://h/o/n/resolve/main/dir/a%20b.json");
}

TEST(Http, RetryAfterInSecondsOrAsAnHttpDate) {
  EXPECT_EQ(net::ParseRetryAfter("120"), 120.0);
  EXPECT_EQ(net::ParseRetryAfter("0"), 0.0);
  EXPECT_EQ(net::ParseRetryAfter(""), -1.0);
  EXPECT_EQ(net::ParseRetryAfter("soon"), -1.0);
  EXPECT_EQ(net::ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), 0.0);  // in the past: now
  // An HTTP-date 90 s ahead (IMF-fixdate, always GMT).
  const std::time_t ahead = std::time(nullptr) + 90;
  char date[64];
  std::strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", std::gmtime(&ahead));
  const double wait = net::ParseRetryAfter(date);
  EXPECT_GE(wait, 88.0) << date;
  EXPECT_LE(wait, 90.0) << date;
}

TEST(Token, FlagThenEnvironmentThenFiles) {
  const fs::path home = TempDir("token");
  std::ofstream(home / "token") << "hf_from_file\n";
  ::setenv("HF_HOME", home.c_str(), 1);
  ::unsetenv("HF_TOKEN_PATH");
  ::unsetenv("HF_TOKEN");
  EXPECT_EQ(net::ResolveToken("").token, "hf_from_file");
  ::setenv("HF_TOKEN", "hf_env", 1);
  EXPECT_EQ(net::ResolveToken("").token, "hf_env");
  EXPECT_EQ(net::ResolveToken("hf_flag").token, "hf_flag");
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HF_HOME");
  fs::remove_all(home);
}

TEST(Hash, Sha256AndGitBlobIds) {
  setup::Hasher sha(setup::Hasher::Kind::kSha256, 0);
  sha.Update("abc", 3);
  EXPECT_EQ(sha.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // `git hash-object` of a file holding "hello\n".
  setup::Hasher blob(setup::Hasher::Kind::kGitBlobSha1, 6);
  blob.Update("hello\n", 6);
  EXPECT_EQ(blob.HexDigest(), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST(ExpertLog, TornTailIsIgnoredAndRewriteReplaces) {
  const fs::path dir = TempDir("log");
  const std::string path = (dir / "experts.log").string();
  {
    setup::ExpertLog log;
    std::vector<std::pair<int64_t, int32_t>> present;
    ASSERT_TRUE(log.Open(path, &present).ok());
    EXPECT_TRUE(present.empty());
    ASSERT_TRUE(log.Append(3, {17}).ok());
    ASSERT_TRUE(log.Append(4, {0}).ok());
  }
  {  // a crash mid-append: 7 bytes of a third record, then a corrupt checksum
    std::ofstream(path, std::ios::app | std::ios::binary) << std::string("DFEX\x01\x02\x03", 7);
  }
  {
    setup::ExpertLog log;
    std::vector<std::pair<int64_t, int32_t>> present;
    ASSERT_TRUE(log.Open(path, &present).ok());
    ASSERT_EQ(present.size(), 2u);
    EXPECT_EQ(present[0], (std::pair<int64_t, int32_t>{3, 17}));
    EXPECT_EQ(fs::file_size(path), 32u);  // the torn tail was cut
    ASSERT_TRUE(log.Append(5, {5}).ok());
    ASSERT_TRUE(log.Rewrite({{5, 5}}).ok());
    ASSERT_TRUE(log.Append(6, {1}).ok());
  }
  setup::ExpertLog log;
  std::vector<std::pair<int64_t, int32_t>> present;
  ASSERT_TRUE(log.Open(path, &present).ok());
  ASSERT_EQ(present.size(), 2u);
  EXPECT_EQ(present[0], (std::pair<int64_t, int32_t>{5, 5}));
  EXPECT_EQ(present[1], (std::pair<int64_t, int32_t>{6, 1}));
  fs::remove_all(dir);
}

TEST(ShardLayout, ExpertSpansAndResidentRanges) {
  // Header: one spine tensor (4 bytes), expert 0 of layer 1 as two tensors (2 + 2), a spine
  // tensor after it (4 bytes).
  const std::string json =
      R"({"language_model.model.norm.weight":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
      R"("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed":)"
      R"({"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
      R"("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_scale":)"
      R"({"dtype":"U8","shape":[2],"data_offsets":[6,8]},)"
      R"("language_model.model.layers.1.block_sparse_moe.shared_experts.x":)"
      R"({"dtype":"U8","shape":[4],"data_offsets":[8,12]}})";
  std::vector<uint8_t> header(8 + json.size());
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) header[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(json.begin(), json.end(), header.begin() + 8);
  const uint64_t data = 8 + n;
  auto layout = setup::LayoutFromHeader(header, data + 12, "t");
  ASSERT_TRUE(layout.ok()) << layout.status().message();
  ASSERT_EQ(layout->experts.size(), 1u);
  EXPECT_EQ(layout->experts[0].layer, 1);
  EXPECT_EQ(layout->experts[0].offset, data + 4);
  EXPECT_EQ(layout->experts[0].bytes, 4u);
  ASSERT_EQ(layout->resident.size(), 2u);
  EXPECT_EQ(layout->resident[0], (std::pair<uint64_t, uint64_t>{0, data + 4}));
  EXPECT_EQ(layout->resident[1], (std::pair<uint64_t, uint64_t>{data + 8, data + 12}));
  EXPECT_EQ(layout->resident_bytes, data + 8);
}

}  // namespace
}  // namespace deltafin
