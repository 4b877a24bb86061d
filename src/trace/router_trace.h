// `deltafin run --trace FILE`: the router trace, a ForwardObserver that writes one JSON line per
// fed token position (router_trace.jsonl; schema in docs/TRACE.md):
//
//   {"position": 12, "token": 345,
//    "layers": [{"layer": 1, "experts": [7, 3, 60, 12], "weights": [0.41, 0.22, 0.2, 0.17]}, ...]}
//
//   position  the sequence position (0-based), strictly increasing by line;
//   token     the input token id fed at that position (prompt ids, then each generated token that
//             was fed back; the last generated token is never fed, so it has no line);
//   layers    every MoE layer in ascending decoder-layer index (0-based, the same index as
//             config.json's layers; dense layers are absent), each with the routed expert ids in
//             selection order and the combine weight the engine applied to each (float, printed
//             with 9 significant digits so it reads back exactly).
//
// Lines are written (and flushed) as positions complete: after a prefill chunk (the engine routes
// layer-major over a chunk, so a position is complete only when its Prefill call returns) and
// after each decode step. A killed run therefore leaves only complete lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"

namespace deltafin::trace {

class RouterTraceWriter : public ForwardObserver {
 public:
  // Creates (truncates) `path`.
  static Result<std::unique_ptr<RouterTraceWriter>> Open(const std::string& path);
  ~RouterTraceWriter() override;
  RouterTraceWriter(const RouterTraceWriter&) = delete;
  RouterTraceWriter& operator=(const RouterTraceWriter&) = delete;

  void OnRoute(int64_t position, int64_t layer, std::span<const int32_t> experts,
               std::span<const float> weights) override;

  // Writes the lines of positions first_position .. first_position + tokens.size() - 1, fed with
  // `tokens`, from the routes received since the last call, and flushes the file.
  Status WritePositions(int64_t first_position, std::span<const int32_t> tokens);
  // Closes the file, reporting a failed final flush.
  Status Close();

 private:
  RouterTraceWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}

  struct Route {
    int64_t position;
    int64_t layer;
    size_t offset;  // into experts_ / weights_
    size_t count;
  };
  std::FILE* file_;
  std::string path_;
  std::vector<Route> routes_;  // since the last WritePositions, in arrival order
  std::vector<int32_t> experts_;
  std::vector<float> weights_;
  std::vector<size_t> order_;  // scratch: routes_ indices sorted by (position, layer)
  std::string line_;
};

}  // namespace deltafin::trace
