#include "trace/router_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace deltafin::trace {

Result<std::unique_ptr<RouterTraceWriter>> RouterTraceWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return Status::Error("--trace " + path + ": cannot create: " + std::strerror(errno));
  }
  return std::unique_ptr<RouterTraceWriter>(new RouterTraceWriter(f, path));
}

RouterTraceWriter::~RouterTraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void RouterTraceWriter::OnRoute(int64_t position, int64_t layer, std::span<const int32_t> experts,
                                std::span<const float> weights) {
  const size_t n = std::min(experts.size(), weights.size());
  routes_.push_back({position, layer, experts_.size(), n});
  experts_.insert(experts_.end(), experts.begin(), experts.begin() + static_cast<ptrdiff_t>(n));
  weights_.insert(weights_.end(), weights.begin(), weights.begin() + static_cast<ptrdiff_t>(n));
}

Status RouterTraceWriter::WritePositions(int64_t first_position, std::span<const int32_t> tokens) {
  if (file_ == nullptr) return Status::Error("--trace " + path_ + ": already closed");
  order_.resize(routes_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [this](size_t a, size_t b) {
    const Route &ra = routes_[a], &rb = routes_[b];
    return ra.position != rb.position ? ra.position < rb.position : ra.layer < rb.layer;
  });
  size_t next = 0;
  char num[32];
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t position = first_position + static_cast<int64_t>(t);
    while (next < order_.size() && routes_[order_[next]].position < position) ++next;  // stale
    line_.clear();
    line_ += "{\"position\": " + std::to_string(position) +
             ", \"token\": " + std::to_string(tokens[t]) + ", \"layers\": [";
    bool first_layer = true;
    for (; next < order_.size() && routes_[order_[next]].position == position; ++next) {
      const Route& r = routes_[order_[next]];
      line_ += first_layer ? "{\"layer\": " : ", {\"layer\": ";
      first_layer = false;
      line_ += std::to_string(r.layer);
      line_ += ", \"experts\": [";
      for (size_t j = 0; j < r.count; ++j) {
        if (j) line_ += ", ";
        line_ += std::to_string(experts_[r.offset + j]);
      }
      line_ += "], \"weights\": [";
      for (size_t j = 0; j < r.count; ++j) {
        if (j) line_ += ", ";
        std::snprintf(num, sizeof(num), "%.9g", static_cast<double>(weights_[r.offset + j]));
        line_ += num;
      }
      line_ += "]}";
    }
    line_ += "]}\n";
    if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size()) {
      return Status::Error("--trace " + path_ + ": write failed: " + std::strerror(errno));
    }
  }
  routes_.clear();
  experts_.clear();
  weights_.clear();
  if (std::fflush(file_) != 0) {
    return Status::Error("--trace " + path_ + ": write failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status RouterTraceWriter::Close() {
  if (file_ == nullptr) return Status::Ok();
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok) return Status::Error("--trace " + path_ + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace deltafin::trace
