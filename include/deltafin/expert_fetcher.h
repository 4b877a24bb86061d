// ExpertFetcher: how a stream install brings missing routed experts onto the local disk.
//
// A stream install (`deltafin setup --stream`) keeps every shard as a local sparse file of its
// full size: the safetensors header and every spine tensor are present; routed-expert spans are
// holes until first use. Before the engine reads an expert's span from its shard file it asks the
// fetcher to make that span local (one ranged GET per expert, written in place at the expert's own
// offset and made durable before it is marked present). Full installs and plain HF snapshot
// folders have no fetcher. Implementations live in src/setup; the engine only sees this interface.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace deltafin {

class ExpertFetcher {
 public:
  virtual ~ExpertFetcher() = default;
  // True when expert `expert` of MoE layer `layer` (the model's layer index) is complete on disk.
  // Thread-safe and cheap: called for every expert a forward pass needs.
  virtual bool IsLocal(int64_t layer, int32_t expert) const = 0;
  // Makes every listed expert of `layer` local, fetching the missing ones concurrently. On return
  // with Ok every listed expert is complete on disk; on error nothing incomplete is marked present
  // and the message names the layer, expert, URL and byte range. Thread-safe.
  virtual Status FetchExperts(int64_t layer, std::span<const int32_t> experts) = 0;
};

}  // namespace deltafin
