// The writer of the row-int8 spine (`deltafin convert-spine-int8`): converts a checkpoint's spine
// linears (docs/MODEL.md §3.6) into <model>/spine-int8/, the layout weights/spine_int8.h reads at
// run time
// (--spine int8) and docs/INT8.md describes.
//
// Crash-safe and resumable: each file is written with io/durable_file.h ("<final>.tmp", fsync,
// rename), so a final name only ever holds a complete file; once both files of a tensor are in
// place a line with their sha256s is appended (and fsync'ed) to progress.jsonl. A rerun skips
// tensors whose progress line matches files of the right sizes (and, with `verify`, the right
// sha256s), re-converts the rest, and finally writes manifest.json atomically. manifest.json is
// removed before any tensor is (re)written, so the engine never loads a half-converted folder.
#pragma once

#include <string>

#include "base/status.h"

namespace deltafin::setup {

// Converts (or finishes converting) `model_dir`'s spine into `model_dir`/spine-int8, printing
// one line per tensor and a summary to stdout. Sets *mismatched when a recorded tensor's files
// did not match (it was re-converted); with `verify` the files are also re-hashed.
Status ConvertSpineInt8(const std::string& model_dir, bool verify, bool* mismatched);

}  // namespace deltafin::setup
