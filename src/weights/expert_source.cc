#include "weights/expert_source.h"

namespace deltafin {

Status MappedExperts::Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) {
  layer_ = layer;
  experts_ = experts;
  next_ = 0;
  stats->expert_loads += experts.size();
  stats->expert_cache_hits += experts.size();  // mapped: in RAM or the page cache
  return Status::Ok();
}

Result<ExpertSource::Ready> MappedExperts::WaitAny(SessionStats* /*stats*/) {
  if (next_ >= static_cast<int64_t>(experts_.size())) {
    return Status::Error("internal: WaitAny past the experts of Begin");
  }
  const int64_t i = next_++;
  const auto& spans = w_.layers[static_cast<size_t>(layer_)].moe.expert_spans;
  return Ready{i, spans[static_cast<size_t>(experts_[static_cast<size_t>(i)])]};
}

Status FetchingExperts::Begin(int64_t layer, std::span<const int32_t> experts,
                              SessionStats* stats) {
  size_t missing = 0;
  for (const int32_t e : experts) {
    if (!fetcher_->IsLocal(layer, e)) scratch_[missing++] = e;
  }
  if (missing > 0) DF_RETURN_IF_ERROR(fetcher_->FetchExperts(layer, {scratch_.data(), missing}));
  return inner_->Begin(layer, experts, stats);
}

void FetchingExperts::Prefetch(int64_t layer, std::span<const int32_t> experts,
                               SessionStats* stats) {
  size_t local = 0;
  for (const int32_t e : experts) {
    if (fetcher_->IsLocal(layer, e)) scratch_[local++] = e;
  }
  if (local > 0) inner_->Prefetch(layer, {scratch_.data(), local}, stats);
}

}  // namespace deltafin
