#include "weights/read_probe.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "base/parallel_each.h"
#include "io/direct_file.h"

namespace deltafin {

namespace {

// splitmix64: the spans are drawn up front from the seed, so a seed always reads the same.
class SpanDraw {
 public:
  explicit SpanDraw(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

struct ExpertSpan {
  int shard = 0;
  uint64_t offset = 0;
};

ExpertSpan RandomExpert(const LayerWeights& l, SpanDraw* draw) {
  return {l.moe.expert_shard, l.moe.expert_offsets[draw->Next() % l.moe.expert_offsets.size()]};
}

}  // namespace

Result<double> TimeParallelReads(int threads, int64_t count, size_t capacity,
                                 const std::function<Status(int64_t, uint8_t*)>& read) {
  if (count < 1 || threads < 1) return Status::Error("nothing to probe");
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> buffers;
  for (int t = 0; t < threads; ++t) {
    buffers.emplace_back(
        static_cast<uint8_t*>(std::aligned_alloc(DirectFile::kIoAlignment, capacity)), &std::free);
    if (buffers.back() == nullptr) return Status::Error("out of memory for probe buffers");
  }
  const auto start = std::chrono::steady_clock::now();
  DF_RETURN_IF_ERROR(
      ForEachOnThreads(threads, static_cast<size_t>(count), [&](size_t i, int thread) -> Status {
        return read(static_cast<int64_t>(i), buffers[static_cast<size_t>(thread)].get());
      }));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<double> ProbeExpertReads(const ModelWeights& weights, ExpertSpanReader& reader, int threads,
                                int64_t count, uint64_t seed) {
  const uint64_t bytes = weights.config.ExpertBytes();
  std::vector<const LayerWeights*> moe_layers;
  for (const auto& l : weights.layers) {
    if (l.is_moe) moe_layers.push_back(&l);
  }
  if (moe_layers.empty() || count < 1) return Status::Error("nothing to probe");
  SpanDraw draw(seed);
  std::vector<ExpertSpan> spans(static_cast<size_t>(count));
  for (ExpertSpan& sp : spans)
    sp = RandomExpert(*moe_layers[draw.Next() % moe_layers.size()], &draw);
  const size_t capacity = DirectFile::BufferBytesFor(bytes);
  DF_ASSIGN_OR_RETURN(
      const double seconds,
      TimeParallelReads(threads, count, capacity, [&](int64_t i, uint8_t* buffer) -> Status {
        const ExpertSpan& sp = spans[static_cast<size_t>(i)];
        return reader.Read(sp.shard, sp.offset, bytes, buffer, capacity).status();
      }));
  return static_cast<double>(bytes) * static_cast<double>(count) / seconds;
}

Result<double> ProbeDecodeReads(const ModelWeights& weights, ExpertSpanReader& reader,
                                const SpineRing& ring, int threads, uint64_t seed) {
  const uint64_t expert_bytes = weights.config.ExpertBytes();
  const auto top_k = static_cast<size_t>(weights.config.num_experts_per_token);
  const std::vector<SpineRing::StreamedRead> spine = ring.StreamedReads();
  // The step's reads in pass order: a spine chunk carries its index into `spine`, an expert its
  // span (index -1).
  struct Read {
    int64_t spine_index = -1;
    ExpertSpan expert;
  };
  std::vector<Read> reads;
  SpanDraw draw(seed);
  size_t next_chunk = 0;
  uint64_t total = 0;
  for (size_t layer = 0; layer <= weights.layers.size(); ++layer) {
    for (; next_chunk < spine.size() && spine[next_chunk].group == static_cast<int64_t>(layer);
         ++next_chunk) {
      reads.push_back({static_cast<int64_t>(next_chunk), {}});
      total += spine[next_chunk].bytes;
    }
    if (layer == weights.layers.size() || !weights.layers[layer].is_moe) continue;
    for (size_t k = 0; k < top_k; ++k) {
      reads.push_back({-1, RandomExpert(weights.layers[layer], &draw)});
      total += expert_bytes;
    }
  }
  uint64_t largest = expert_bytes;
  for (const auto& r : spine) largest = std::max(largest, r.bytes);
  const size_t capacity = DirectFile::BufferBytesFor(largest);
  DF_ASSIGN_OR_RETURN(
      const double seconds,
      TimeParallelReads(
          threads, static_cast<int64_t>(reads.size()), capacity,
          [&](int64_t i, uint8_t* buffer) -> Status {
            const Read& r = reads[static_cast<size_t>(i)];
            if (r.spine_index >= 0) {
              return ring.ReadForProbe(spine[static_cast<size_t>(r.spine_index)], buffer, capacity);
            }
            return reader.Read(r.expert.shard, r.expert.offset, expert_bytes, buffer, capacity)
                .status();
          }));
  return static_cast<double>(total) / seconds;
}

}  // namespace deltafin
