// Streamed experts against mapped ones, and the streamer's failure paths.
//
// Bit-identity: the same prompt and greedy continuation through mapped experts and through the
// streamer (smallest cache, large cache, each lookahead mode, buffered reads, 1 and 8 I/O threads,
// prefill chunks that need several cache batches) must give byte-identical logits, on the golden
// tiny checkpoint and on a make-model tiny checkpoint. Faults: an I/O error, a corrupted scale
// byte and a shard truncated after load must each fail the forward pass with a message naming
// the layer, expert, file and offset; a budget too small for streaming fails at load with the
// numbers. Prefetch bookkeeping (hits, cancelled guesses) is checked with a reader that blocks
// until released, so the order of events is fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <thread>

#include "deltafin/engine.h"
#include "golden/golden_data.h"
#include "model/forward.h"
#include "modelgen/make_model.h"
#include "unit/test_files.h"
#include "weights/expert_streamer.h"
#include "weights/weights.h"

namespace deltafin {
namespace {

struct Run {
  std::vector<float> logits;  // prefill (every position) then each decode step
  SessionStats stats;
};

Run Generate(const EngineOptions& options, int decode_steps = 6) {
  auto engine = Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  const int64_t vocab = (*engine)->info().vocab_size;
  auto session = (*engine)->NewSession();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((3 + 37 * i) % vocab));
  Run run;
  run.logits.resize(prompt.size() * static_cast<size_t>(vocab));
  Status st = session->Prefill(prompt, run.logits);
  EXPECT_TRUE(st.ok()) << st.message();
  for (int s = 0; s < decode_steps && st.ok(); ++s) {
    st = session->Decode(ArgmaxToken(session->Logits()));
    EXPECT_TRUE(st.ok()) << st.message();
    auto l = session->Logits();
    run.logits.insert(run.logits.end(), l.begin(), l.end());
  }
  run.stats = session->stats();
  return run;
}

struct StreamCase {
  const char* name;
  int io_threads;
  bool large_cache;
  EngineOptions::Lookahead lookahead;
  bool direct;
  int64_t prefill_chunk;
};

void ExpectStreamedEqualsMapped(const std::string& model_dir) {
  auto config = LoadModelConfig(model_dir);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EngineOptions mapped;
  mapped.model_dir = model_dir;
  mapped.experts = EngineOptions::Experts::kMapped;
  const Run want = Generate(mapped);
  ASSERT_FALSE(want.logits.empty());
  EXPECT_EQ(want.stats.expert_bytes_read, 0u);

  using L = EngineOptions::Lookahead;
  const StreamCase cases[] = {
      {"smallest cache, 1 io thread", 1, false, L::kLayerOutput, true, 32},
      {"smallest cache, 8 io threads", 8, false, L::kLayerOutput, true, 32},
      {"large cache", 4, true, L::kLayerOutput, true, 32},
      {"no lookahead", 4, false, L::kOff, true, 32},
      {"post-attention lookahead", 4, false, L::kPostAttention, true, 32},
      {"both lookaheads", 4, false, L::kBoth, true, 32},
      {"buffered reads", 4, false, L::kLayerOutput, false, 32},
      {"prefill chunk 7", 2, false, L::kBoth, true, 7},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EngineOptions o = mapped;
    o.experts = EngineOptions::Experts::kStreamed;
    o.io_threads = c.io_threads;
    o.lookahead = c.lookahead;
    o.direct_io = c.direct;
    o.prefill_chunk = c.prefill_chunk;
    // Large: what the plan leaves, which here is every expert of the model.
    o.expert_cache_bytes = c.large_cache ? 0 : ExpertStreamer::MinCacheBytes(*config, c.io_threads);
    const Run got = Generate(o);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * 4), 0)
        << "streamed logits differ from mapped ones";
    if (c.prefill_chunk == 32) {
      // Same chunking, so the same (layer, expert) uses; every miss was read once.
      EXPECT_EQ(got.stats.expert_loads, want.stats.expert_loads);
    }
    EXPECT_GT(got.stats.expert_bytes_read, 0u);
    EXPECT_LE(got.stats.expert_cache_hits, got.stats.expert_loads);
    if (c.lookahead == L::kOff) {
      // No router guesses: the only reads ahead are a layer's next batch of experts, queued
      // while a batch computes (model/moe.cc), which the next batch always uses.
      EXPECT_EQ(got.stats.prefetch_wasted, 0u);
    }
  }
}

TEST(ExpertStream, StreamedLogitsEqualMappedOnGoldenModel) {
  ExpectStreamedEqualsMapped(testing::GoldenModelDir());
}

TEST(ExpertStream, StreamedLogitsEqualMappedOnGeneratedModel) {
  testing::ScopedTempDir dir;
  MakeModelOptions mo;
  mo.preset = "tiny";
  mo.out_dir = dir.Join("tiny");
  mo.seed = 7;
  mo.fsync = false;
  ASSERT_TRUE(MakeModel(mo).ok());
  ExpectStreamedEqualsMapped(mo.out_dir);
}

TEST(ExpertStream, BudgetTooSmallFailsAtLoadWithNumbers) {
  EngineOptions o;
  o.model_dir = testing::GoldenModelDir();
  o.mem_limit = 1 << 20;
  auto engine = Engine::Load(o);
  ASSERT_FALSE(engine.ok());
  const std::string& m = engine.status().message();
  EXPECT_NE(m.find("memory budget 1.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("too small"), std::string::npos) << m;
  EXPECT_NE(m.find("session"), std::string::npos) << m;
  EXPECT_NE(m.find("smallest expert cache"), std::string::npos) << m;
}

// A reader around the real one that can fail, corrupt, or hold reads until released.
class TestReader : public ExpertSpanReader {
 public:
  explicit TestReader(std::unique_ptr<ExpertSpanReader> inner) : inner_(std::move(inner)) {}
  enum class Fault { kNone, kError, kCorruptScale };
  Fault fault = Fault::kNone;
  uint64_t fault_offset = 0;  // the span offset to fault on
  uint64_t scale_offset = 0;  // where inside a span a scale byte is (kCorruptScale)
  std::atomic<int> reads{0};

  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Waits until `n` reads have started.
  void WaitForReads(int n) {
    while (reads.load() < n) std::this_thread::yield();
  }

  Result<const uint8_t*> Read(int shard, uint64_t offset, uint64_t length, uint8_t* buffer,
                              size_t capacity) override {
    reads.fetch_add(1);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !held_; });
    }
    if (fault == Fault::kError && offset == fault_offset) {
      return Status::Error("injected I/O error");
    }
    auto got = inner_->Read(shard, offset, length, buffer, capacity);
    if (got.ok() && fault == Fault::kCorruptScale && offset == fault_offset) {
      const_cast<uint8_t*>(*got)[scale_offset] = 0;
    }
    return got;
  }
  std::string ShardPath(int shard) const override { return inner_->ShardPath(shard); }
  uint64_t DiskBytes(int shard, uint64_t offset, uint64_t length) const override {
    return inner_->DiskBytes(shard, offset, length);
  }
  const char* ModeName() const override { return inner_->ModeName(); }

 private:
  std::unique_ptr<ExpertSpanReader> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

class StreamerFixture : public ::testing::Test {
 protected:
  void SetUp() override { Load(testing::GoldenModelDir()); }
  void Load(const std::string& dir) {
    auto w = ModelWeights::Load(dir, BindOptions{});
    ASSERT_TRUE(w.ok()) << w.status().message();
    weights_ = std::move(*w);
    auto inner = OpenShardSpanReader(*weights_, true);
    ASSERT_TRUE(inner.ok()) << inner.status().message();
    auto reader = std::make_unique<TestReader>(std::move(*inner));
    reader_ = reader.get();
    ExpertStreamOptions so;
    so.io_threads = 1;
    so.cache_bytes = 32 * ExpertStreamer::SlotBytes(weights_->config);
    auto s = ExpertStreamer::Create(*weights_, so, std::move(reader));
    ASSERT_TRUE(s.ok()) << s.status().message();
    streamer_ = std::move(*s);
  }
  // One decode step through ForwardPass with the streamer; returns its status.
  Status Step() {
    ForwardPass fp(*weights_, 4, 64);
    fp.SetExpertSource(streamer_.get(), EngineOptions::Lookahead::kBoth);
    const int32_t tokens[3] = {5, 17, 99};
    std::vector<float> logits(static_cast<size_t>(weights_->config.vocab_size));
    return fp.Run(tokens, 3, false, logits.data());
  }
  uint64_t Offset(int64_t layer, int32_t expert) const {
    return weights_->layers[static_cast<size_t>(layer)]
        .moe.expert_offsets[static_cast<size_t>(expert)];
  }

  std::unique_ptr<ModelWeights> weights_;
  TestReader* reader_ = nullptr;
  std::unique_ptr<ExpertStreamer> streamer_;
};

TEST_F(StreamerFixture, IoErrorNamesLayerExpertFileAndOffset) {
  // Fail every expert of layer 2 that is read: whichever the router picks fails.
  const std::string shard = reader_->ShardPath(weights_->layers[2].moe.expert_shard);
  bool failed = false;
  for (int32_t e = 0; e < 16 && !failed; ++e) {
    reader_->fault = TestReader::Fault::kError;
    reader_->fault_offset = Offset(2, e);
    SessionStats stats;
    ASSERT_TRUE(streamer_->Begin(2, std::vector<int32_t>{e}, &stats).ok());
    auto got = streamer_->WaitAny(&stats);
    streamer_->End();
    ASSERT_FALSE(got.ok());
    const std::string& m = got.status().message();
    EXPECT_NE(m.find("layer 2 expert " + std::to_string(e)), std::string::npos) << m;
    EXPECT_NE(m.find(shard), std::string::npos) << m;
    EXPECT_NE(m.find("offset " + std::to_string(Offset(2, e))), std::string::npos) << m;
    EXPECT_NE(m.find("injected I/O error"), std::string::npos) << m;
    failed = true;
  }
  // The failed slot is dropped: the next use reads it again and succeeds.
  reader_->fault = TestReader::Fault::kNone;
  SessionStats stats;
  ASSERT_TRUE(streamer_->Begin(2, std::vector<int32_t>{0}, &stats).ok());
  EXPECT_TRUE(streamer_->WaitAny(&stats).ok());
  streamer_->End();
  EXPECT_EQ(stats.expert_cache_hits, 0u);
}

TEST_F(StreamerFixture, ForwardPassFailsOnAFaultyExpertRead) {
  // Every expert of layer 3 fails: the forward pass must stop with that layer's error.
  reader_->fault = TestReader::Fault::kError;
  Status st = Status::Ok();
  for (int32_t e = 0; e < 16 && st.ok(); ++e) {
    reader_->fault_offset = Offset(3, e);
    st = Step();
  }
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("layer 3 expert"), std::string::npos) << st.message();
}

TEST_F(StreamerFixture, CorruptScaleByteIsCaught) {
  reader_->fault = TestReader::Fault::kCorruptScale;
  reader_->fault_offset = Offset(1, 4);
  reader_->scale_offset = weights_->expert_layout.w2_scale + 3;
  SessionStats stats;
  ASSERT_TRUE(streamer_->Begin(1, std::vector<int32_t>{4}, &stats).ok());
  auto got = streamer_->WaitAny(&stats);
  streamer_->End();
  ASSERT_FALSE(got.ok());
  const std::string& m = got.status().message();
  EXPECT_NE(m.find("layer 1 expert 4"), std::string::npos) << m;
  EXPECT_NE(m.find("w2.weight_scale"), std::string::npos) << m;
  EXPECT_NE(m.find("scale byte 0"), std::string::npos) << m;
}

TEST_F(StreamerFixture, TruncatedShardIsAShortReadError) {
  // Copy the model, load it, then cut the expert shard short under the loaded engine.
  testing::ScopedTempDir dir;
  std::filesystem::copy(testing::GoldenModelDir(), dir.Join("m"));
  streamer_.reset();
  Load(dir.Join("m"));
  const int shard = weights_->layers[8].moe.expert_shard;
  const std::string path = reader_->ShardPath(shard);
  std::filesystem::resize_file(path, Offset(8, 0) + 100);
  SessionStats stats;
  ASSERT_TRUE(streamer_->Begin(8, std::vector<int32_t>{0}, &stats).ok());
  auto got = streamer_->WaitAny(&stats);
  streamer_->End();
  ASSERT_FALSE(got.ok());
  const std::string& m = got.status().message();
  EXPECT_NE(m.find("layer 8 expert 0"), std::string::npos) << m;
  EXPECT_NE(m.find("short read"), std::string::npos) << m;
  EXPECT_NE(m.find(path), std::string::npos) << m;
}

TEST_F(StreamerFixture, CacheHitsPrefetchHitsAndCancelledGuesses) {
  SessionStats stats;
  // A miss, then a hit.
  ASSERT_TRUE(streamer_->Begin(1, std::vector<int32_t>{0, 1}, &stats).ok());
  ASSERT_TRUE(streamer_->WaitAny(&stats).ok());
  ASSERT_TRUE(streamer_->WaitAny(&stats).ok());
  streamer_->End();
  EXPECT_EQ(stats.expert_loads, 2u);
  EXPECT_EQ(stats.expert_cache_hits, 0u);
  ASSERT_TRUE(streamer_->Begin(1, std::vector<int32_t>{1}, &stats).ok());
  ASSERT_TRUE(streamer_->WaitAny(&stats).ok());
  streamer_->End();
  EXPECT_EQ(stats.expert_cache_hits, 1u);

  // Guesses for layer 2: the one I/O thread takes the first and blocks; the rest stay queued.
  reader_->Hold();
  const int before = reader_->reads.load();
  streamer_->Prefetch(2, std::vector<int32_t>{5, 6, 7}, &stats);
  reader_->WaitForReads(before + 1);
  EXPECT_EQ(stats.prefetch_issued, 3u);
  // Layer 2 routes to 5 (in flight: a prefetch hit) and 9 (a miss); 6 and 7 are cancelled.
  ASSERT_TRUE(streamer_->Begin(2, std::vector<int32_t>{5, 9}, &stats).ok());
  EXPECT_EQ(stats.prefetch_wasted, 2u);
  reader_->Release();
  ASSERT_TRUE(streamer_->WaitAny(&stats).ok());
  ASSERT_TRUE(streamer_->WaitAny(&stats).ok());
  streamer_->End();
  EXPECT_EQ(stats.prefetch_hits, 1u);
  EXPECT_EQ(reader_->reads.load(), before + 2);  // 5 and 9 only
  // Bytes: 0, 1, then 5 and 9 (the cancelled guesses are not counted).
  const uint64_t per = reader_->DiskBytes(0, Offset(1, 0), weights_->expert_layout.bytes);
  EXPECT_GE(stats.expert_bytes_read, 4 * weights_->expert_layout.bytes);
  EXPECT_LE(stats.expert_bytes_read, 4 * (per + 4096));
}

// A model spread over two drives, where drive 1 holds the odd experts and stalls until released:
// each drive has its own queue depth on the scheduler (io_threads reads in flight per drive), so
// the even experts, on drive 0, are read while the odd ones wait for drive 1.
class TwoDriveReader : public ExpertSpanReader {
 public:
  TwoDriveReader(std::unique_ptr<ExpertSpanReader> inner, std::vector<uint64_t> slow_offsets)
      : inner_(std::move(inner)), slow_(std::move(slow_offsets)) {}
  int Drives() const override { return 2; }
  int Choose(int /*shard*/, uint64_t offset, uint64_t /*length*/, uint32_t free) override {
    const int d = std::find(slow_.begin(), slow_.end(), offset) != slow_.end() ? 1 : 0;
    return (free & (1u << d)) != 0 ? d : -1;
  }
  Result<const uint8_t*> ReadOn(int drive, int shard, uint64_t offset, uint64_t length,
                                uint8_t* buffer, size_t capacity) override {
    if (drive == 1) {
      slow_started.fetch_add(1);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return released_; });
    }
    return inner_->Read(shard, offset, length, buffer, capacity);
  }
  Result<const uint8_t*> Read(int shard, uint64_t offset, uint64_t length, uint8_t* buffer,
                              size_t capacity) override {
    return ReadOn(Choose(shard, offset, length, 3u), shard, offset, length, buffer, capacity);
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  bool released() {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }
  std::string ShardPath(int shard) const override { return inner_->ShardPath(shard); }
  uint64_t DiskBytes(int shard, uint64_t offset, uint64_t length) const override {
    return inner_->DiskBytes(shard, offset, length);
  }
  const char* ModeName() const override { return inner_->ModeName(); }
  std::atomic<int> slow_started{0};

 private:
  std::unique_ptr<ExpertSpanReader> inner_;
  std::vector<uint64_t> slow_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A layer cut short (an interrupt or an error: End without every WaitAny) while its reads are
// queued behind a stalled one: End cancels the reads not started, so the next layer's full batch
// finds slots (it used to find the cut layer's queued slots unusable: "no expert slot free").
TEST_F(StreamerFixture, ALayerCutShortCancelsItsQueuedReads) {
  auto inner = OpenShardSpanReader(*weights_, true);
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  auto reader = std::make_unique<TestReader>(std::move(*inner));
  TestReader* held = reader.get();
  ExpertStreamOptions so;
  so.io_threads = 1;
  so.cache_bytes = 16 * ExpertStreamer::SlotBytes(weights_->config);
  auto made = ExpertStreamer::Create(*weights_, so, std::move(reader));
  ASSERT_TRUE(made.ok()) << made.status().message();
  ExpertStreamer& s = **made;
  const int64_t batch = s.max_batch();  // 16 - 4 - 1
  ASSERT_LE(batch, weights_->config.num_experts);
  std::vector<int32_t> experts(static_cast<size_t>(batch));
  std::iota(experts.begin(), experts.end(), 0);
  SessionStats stats;
  held->Hold();
  ASSERT_TRUE(s.Begin(1, experts, &stats).ok());
  held->WaitForReads(1);  // one read in flight (held), the rest queued
  s.End();                // the layer gives up
  const uint64_t one_expert = stats.expert_bytes_read;  // only the read that started counts
  ASSERT_TRUE(s.Begin(2, experts, &stats).ok());
  held->Release();
  for (int64_t i = 0; i < batch; ++i) {
    auto ready = s.WaitAny(&stats);
    ASSERT_TRUE(ready.ok()) << ready.status().message();
  }
  s.End();
  EXPECT_EQ(held->reads.load(), 1 + batch);  // the cancelled reads never ran
  // The bytes counted are the started read's and layer 2's, nothing for the cancelled ones.
  const auto disk_bytes = [&](int64_t layer, int32_t e) {
    return held->DiskBytes(weights_->layers[static_cast<size_t>(layer)].moe.expert_shard,
                           Offset(layer, e), weights_->expert_layout.bytes);
  };
  uint64_t layer2 = 0;
  for (const int32_t e : experts) layer2 += disk_bytes(2, e);
  EXPECT_TRUE(std::any_of(experts.begin(), experts.end(), [&](int32_t e) {
    return disk_bytes(1, e) == one_expert;
  })) << one_expert;
  EXPECT_EQ(stats.expert_bytes_read, one_expert + layer2);
}

TEST_F(StreamerFixture, AStalledDriveDoesNotHoldUpReadsOfAnother) {
  constexpr int64_t kLayer = 1;
  std::vector<uint64_t> slow;
  for (int32_t e = 1; e < 8; e += 2) slow.push_back(Offset(kLayer, e));
  auto inner = OpenShardSpanReader(*weights_, true);
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  auto reader = std::make_unique<TwoDriveReader>(std::move(*inner), slow);
  TwoDriveReader* two = reader.get();
  ExpertStreamOptions so;
  so.io_threads = 2;  // two reads in flight per drive
  so.cache_bytes = 32 * ExpertStreamer::SlotBytes(weights_->config);
  auto made = ExpertStreamer::Create(*weights_, so, std::move(reader));
  ASSERT_TRUE(made.ok()) << made.status().message();
  ExpertStreamer& s = **made;
  // Should the test fail, release the drive after a while so it ends instead of hanging.
  std::thread watchdog([two] {
    for (int i = 0; i < 500 && !two->released(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    two->Release();
  });
  struct Join {
    std::thread& t;
    TwoDriveReader* two;
    ~Join() {
      two->Release();
      t.join();
    }
  } join{watchdog, two};
  // The odd (stalled) experts first in the demand queue: with one pool of io_threads threads
  // shared by both drives, both threads would wait on drive 1 and nothing would come back.
  const std::vector<int32_t> experts = {1, 3, 5, 7, 0, 2, 4, 6};
  SessionStats stats;
  ASSERT_TRUE(s.Begin(kLayer, experts, &stats).ok());
  const int shard = weights_->layers[kLayer].moe.expert_shard;
  std::ifstream file(weights_->checkpoint.shard_paths()[static_cast<size_t>(shard)],
                     std::ios::binary);
  std::vector<char> want(weights_->expert_layout.bytes);
  for (int i = 0; i < 4; ++i) {
    auto ready = s.WaitAny(&stats);
    ASSERT_TRUE(ready.ok()) << ready.status().message();
    EXPECT_FALSE(two->released()) << "drive 0's reads waited for the stalled drive";
    EXPECT_GE(ready->index, 4) << "a stalled drive's expert came back before its release";
    // The bytes are the expert's own.
    const int32_t e = experts[static_cast<size_t>(ready->index)];
    file.seekg(static_cast<std::streamoff>(Offset(kLayer, e)));
    ASSERT_TRUE(file.read(want.data(), static_cast<std::streamsize>(want.size())));
    EXPECT_EQ(std::memcmp(ready->data, want.data(), want.size()), 0) << e;
  }
  // Drive 1 took only its own depth of reads.
  EXPECT_EQ(two->slow_started.load(), 2);
  two->Release();
  for (int i = 0; i < 4; ++i) {
    auto ready = s.WaitAny(&stats);
    ASSERT_TRUE(ready.ok()) << ready.status().message();
    EXPECT_LT(ready->index, 4);
  }
  s.End();
}

TEST_F(StreamerFixture, EveryLookaheadModeGivesTheMappedLogits) {
  const int32_t tokens[4] = {1, 2, 3, 4};
  const size_t vocab = static_cast<size_t>(weights_->config.vocab_size);
  ForwardPass mapped(*weights_, 4, 64);
  std::vector<float> want(vocab * 4);
  ASSERT_TRUE(mapped.Run(tokens, 4, true, want.data()).ok());
  using L = EngineOptions::Lookahead;
  for (L mode : {L::kOff, L::kLayerOutput, L::kPostAttention, L::kBoth}) {
    ForwardPass fp(*weights_, 4, 64);
    fp.SetExpertSource(streamer_.get(), mode);
    std::vector<float> got(vocab * 4);
    ASSERT_TRUE(fp.Run(tokens, 4, true, got.data()).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
    if (mode == L::kOff) {
      EXPECT_EQ(fp.stats().prefetch_issued, 0u);
    } else {
      EXPECT_GT(fp.stats().prefetch_issued + fp.stats().expert_cache_hits, 0u);
    }
  }
}

}  // namespace
}  // namespace deltafin
