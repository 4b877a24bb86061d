#include "weights/spine_ring.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/byte_size.h"
#include "base/parallel_each.h"
#include "io/mapped_file.h"

namespace deltafin {

namespace {

constexpr uint64_t kAlign = DirectFile::kIoAlignment;
constexpr size_t kMaxLayerMatrices = 16;  // ForEachSpineMatrix visits at most 14

// Sizes `buffer` for `bytes` plus direct-read slack and returns its first 4 KiB-aligned byte
// (AlignedBuffer aligns to a cache line only; O_DIRECT needs the block).
uint8_t* AlignedForDirectReads(AlignedBuffer<uint8_t>* buffer, uint64_t bytes, size_t* capacity) {
  buffer->Resize(static_cast<size_t>(bytes + 3 * kAlign));
  const auto addr = reinterpret_cast<uintptr_t>(buffer->data());
  const size_t pad = static_cast<size_t>((kAlign - addr % kAlign) % kAlign);
  *capacity = buffer->size() - pad;
  return buffer->data() + pad;
}

void CopyBuffer(const AlignedBuffer<float>& from, AlignedBuffer<float>* to) {
  to->Resize(from.size());
  if (from.size() > 0) std::memcpy(to->data(), from.data(), from.size() * sizeof(float));
}

// The small mapped vectors are copied so that decode never faults on them.
const float* CopySmall(const float* mapped, int64_t count, std::vector<AlignedBuffer<float>>* out) {
  if (mapped == nullptr) return nullptr;
  out->emplace_back(static_cast<size_t>(count));
  std::memcpy(out->back().data(), mapped, static_cast<size_t>(count) * sizeof(float));
  return out->back().data();
}

void CloneLayer(const ModelConfig& c, const LayerWeights& from, LayerWeights* to,
                std::vector<AlignedBuffer<float>>* small) {
  to->kind = from.kind;
  CopyBuffer(from.input_norm, &to->input_norm);
  CopyBuffer(from.post_attn_norm, &to->post_attn_norm);
  CopyBuffer(from.attn_res_query, &to->attn_res_query);
  CopyBuffer(from.mlp_res_query, &to->mlp_res_query);
  to->is_moe = from.is_moe;
  // The matrices, pairwise over the one list (weights.h); both layers have the same kind.
  const SpineMatrix* matrices[kMaxLayerMatrices];
  size_t n = 0;
  ForEachSpineMatrix(from, [&](const SpineMatrix& m, SpineRole) { matrices[n++] = &m; });
  size_t i = 0;
  ForEachSpineMatrix(*to, [&](SpineMatrix& m, SpineRole) { m = *matrices[i++]; });
  // The small vectors: copied (mapped ones) or widened copies.
  const KdaWeights& k = from.kda;
  KdaWeights& tk = to->kda;
  const int64_t conv = c.kda_width() * c.conv_kernel_size;
  tk.q_conv = CopySmall(k.q_conv, conv, small);
  tk.k_conv = CopySmall(k.k_conv, conv, small);
  tk.v_conv = CopySmall(k.v_conv, conv, small);
  tk.dt_bias = CopySmall(k.dt_bias, c.kda_width(), small);
  tk.o_norm = CopySmall(k.o_norm, c.kda_head_dim, small);
  CopyBuffer(k.a_exp, &tk.a_exp);
  CopyBuffer(from.mla.q_a_norm, &to->mla.q_a_norm);
  CopyBuffer(from.mla.kv_a_norm, &to->mla.kv_a_norm);
  const MoeWeights& e = from.moe;
  MoeWeights& te = to->moe;
  te.correction_bias = CopySmall(e.correction_bias, c.num_experts, small);
  CopyBuffer(e.latent_norm, &te.latent_norm);
  te.expert_spans = e.expert_spans;
  te.expert_shard = e.expert_shard;
  te.expert_offsets = e.expert_offsets;
}

}  // namespace

Result<std::unique_ptr<SpineRing>> SpineRing::Create(const ModelWeights& weights,
                                                     const SpineRingOptions& options,
                                                     IoScheduler* scheduler) {
  std::unique_ptr<SpineRing> ring(new SpineRing());
  DF_RETURN_IF_ERROR(ring->Plan(weights, options));
  ring->io_.Attach(ring.get(), scheduler, options.readers);
  return ring;
}

SpineRing::~SpineRing() {
  io_.Detach();  // no scheduler thread is inside Take or Run after this, so the slots can go
}

Status SpineRing::Plan(const ModelWeights& w, const SpineRingOptions& o) {
  const ModelConfig& c = w.config;
  const size_t n_layers = w.layers.size();
  if (!o.pinned.empty() && o.pinned.size() != n_layers + 1) {
    return Status::Error("spine ring: pin list of " + std::to_string(o.pinned.size()) +
                         " groups for " + std::to_string(n_layers + 1));
  }
  // Pointers into layers_ are taken below: size it once.
  layers_.resize(n_layers);
  small_copies_.reserve(n_layers * 6);
  for (size_t i = 0; i < n_layers; ++i) CloneLayer(c, w.layers[i], &layers_[i], &small_copies_);
  lm_head_ = w.lm_head;
  embed_tokens_ = w.embed_tokens;
  embed_row_bytes_ = static_cast<size_t>(c.hidden_size) * sizeof(uint16_t);

  // Every matrix the ring reads, from the byte map: its file (opened on first use), offset and
  // bytes, and the pointer in layers_ / lm_head_ it feeds.
  std::vector<int> file_of(w.num_spine_files(), -1);  // index into files_
  read_mode_ = o.read_mode;
  groups_.resize(n_layers + 1);
  for (const SpineTensorEntry& e : w.spine_map) {
    if (!IsSpineMatrixRole(e.role)) continue;
    MatrixRef ref;
    ref.matrix =
        e.layer < 0 ? &lm_head_ : LayerMatrix(&layers_[static_cast<size_t>(e.layer)], e.role);
    ref.name = e.layer < 0 ? std::string(SpineRoleName(e.role))
                           : "layer " + std::to_string(e.layer) + " " + SpineRoleName(e.role);
    if (ref.matrix == nullptr || e.file < 0) {
      return Status::Error("spine ring: " + ref.name + " is not bound");
    }
    const auto f = static_cast<size_t>(e.file);
    if (file_of[f] < 0) {
      DF_ASSIGN_OR_RETURN(DirectFile file, DirectFile::Open(w.SpineFilePath(e.file), o.read_mode));
      if (file.mode() != ReadMode::kDirect) read_mode_ = file.mode();
      file_of[f] = static_cast<int>(files_.size());
      files_.push_back(std::move(file));
    }
    ref.file = file_of[f];
    ref.offset = e.offset;
    ref.bytes = e.bytes;
    ref.int8 = e.row_int8;
    Group& g = e.layer < 0 ? groups_.back() : groups_[static_cast<size_t>(e.layer)];
    g.matrices.push_back(std::move(ref));
  }

  // Extents and chunks: sort by place on disk, merge neighbours, lay out in slot order.
  for (Group& g : groups_) {
    std::vector<const MatrixRef*> order;
    for (const MatrixRef& m : g.matrices) order.push_back(&m);
    std::sort(order.begin(), order.end(), [](const MatrixRef* a, const MatrixRef* b) {
      return a->file != b->file ? a->file < b->file : a->offset < b->offset;
    });
    for (const MatrixRef* m : order) {
      const uint64_t begin = m->offset / kAlign * kAlign;
      const uint64_t end = m->offset + m->bytes;
      if (!g.extents.empty() && g.extents.back().file == m->file &&
          begin <= g.extents.back().end + kMaxGap) {
        g.extents.back().end = std::max(g.extents.back().end, end);
      } else {
        g.extents.push_back({m->file, begin, end, 0});
      }
    }
    uint64_t at = 0;
    for (Extent& e : g.extents) {
      e.slot_offset = at;
      // Direct reads ask for whole blocks: the next extent starts past this one's last block.
      at += (e.end - e.begin + kAlign - 1) / kAlign * kAlign;
      for (uint64_t off = e.begin; off < e.end; off += kChunkBytes) {
        Chunk ch{e.file, off, std::min(kChunkBytes, e.end - off), e.slot_offset + (off - e.begin),
                 nullptr};
        for (const MatrixRef* m : order) {
          if (m->file == ch.file && m->offset + m->bytes > ch.offset) {
            ch.tensor = &m->name;
            break;
          }
        }
        g.chunks.push_back(ch);
      }
    }
    g.bytes = at;
  }

  // Pinned groups: read once now, into buffers of their own, by `readers` threads.
  std::vector<PinnedRead> pinned_reads;
  size_t max_chunks = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    g.pinned = !o.pinned.empty() && o.pinned[gi];
    if (!g.pinned) {
      stream_index_.push_back(static_cast<int64_t>(streamed_.size()));
      streamed_.push_back(static_cast<int64_t>(gi));
      slot_bytes_ = std::max(slot_bytes_, g.bytes);
      streamed_bytes_ += g.bytes;
      max_chunks = std::max(max_chunks, g.chunks.size());
      continue;
    }
    stream_index_.push_back(-1);
    size_t capacity = 0;
    g.pinned_base = AlignedForDirectReads(&g.pinned_buffer, g.bytes, &capacity);
    for (size_t k = 0; k < g.chunks.size(); ++k) {
      pinned_reads.push_back({&g, k, capacity - static_cast<size_t>(g.chunks[k].slot_offset)});
    }
    AimGroup(g, g.pinned_base);
    pinned_bytes_ += g.bytes;
  }
  DF_RETURN_IF_ERROR(ReadPinned(pinned_reads, std::max(o.readers, 1)));
  const int depth =
      streamed_.empty() ? 0 : std::clamp(o.depth, 1, static_cast<int>(streamed_.size()));
  slots_.resize(static_cast<size_t>(depth));
  for (Slot& s : slots_) {
    s.base = AlignedForDirectReads(&s.buffer, slot_bytes_, &s.capacity);
    s.error.reserve(256);
  }
  tasks_.resize(static_cast<size_t>(depth) * max_chunks + 1);
  return Status::Ok();
}

Status SpineRing::ReadPinned(const std::vector<PinnedRead>& reads, int readers) {
  // At K3 size the pinned groups are tens of GB: one thread would leave the disk's queue at 1.
  // The error is the first failing chunk's in list order, whichever thread saw it.
  return ForEachOnThreads(readers, reads.size(), [&](size_t i, int) -> Status {
    const PinnedRead& r = reads[i];
    const Chunk& ch = r.group->chunks[r.chunk];
    auto got = files_[static_cast<size_t>(ch.file)].ReadSpan(
        ch.offset, ch.bytes, r.group->pinned_base + ch.slot_offset, r.room);
    if (!got.ok()) return Status::Error("spine " + *ch.tensor + ": " + got.status().message());
    return Status::Ok();
  });
}

void SpineRing::AimGroup(const Group& g, const uint8_t* base) {
  for (const MatrixRef& m : g.matrices) {
    for (const Extent& e : g.extents) {
      if (e.file != m.file || m.offset < e.begin || m.offset + m.bytes > e.end) continue;
      const uint8_t* p = base + e.slot_offset + (m.offset - e.begin);
      if (m.int8) {
        m.matrix->q = reinterpret_cast<const int8_t*>(p);
      } else {
        m.matrix->data = reinterpret_cast<const uint16_t*>(p);
      }
      break;
    }
  }
}

int SpineRing::SlotOf(int64_t group) const {
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].group == group) return static_cast<int>(s);
  }
  return -1;
}

int64_t SpineRing::NextStreamed(int64_t group) const {
  // The streamed group after `group` in pass order, wrapping to the next pass.
  for (int64_t g = group + 1;; ++g) {
    const int64_t wrapped = g % static_cast<int64_t>(groups_.size());
    if (stream_index_[static_cast<size_t>(wrapped)] >= 0) return wrapped;
  }
}

void SpineRing::Queue(int64_t group, int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  const Group& g = groups_[static_cast<size_t>(group)];
  s.group = group;
  s.remaining = static_cast<int>(g.chunks.size());
  s.counted = false;
  s.failed = false;
  s.error.clear();
  AimGroup(g, s.base);
  for (size_t c = 0; c < g.chunks.size(); ++c) {
    tasks_[(task_head_ + task_count_) % tasks_.size()] = {slot, static_cast<int>(c)};
    ++task_count_;
  }
}

Status SpineRing::Acquire(int64_t group, uint64_t* bytes_read) {
  *bytes_read = 0;
  if (group < 0 || group > tail_group()) return Status::Error("spine ring: no such group");
  const Group& g = groups_[static_cast<size_t>(group)];
  std::unique_lock<std::mutex> lock(mutex_);
  int slot = -1;
  if (!g.pinned) {
    slot = SlotOf(group);
    if (slot >= 0 && slots_[static_cast<size_t>(slot)].remaining == 0 &&
        slots_[static_cast<size_t>(slot)].failed) {
      Queue(group, slot);  // a read-ahead that failed: read it again now, once
    } else if (slot < 0) {
      // Asked out of the predicted order (the first pass, or after an error): the reads in
      // flight finish, then the ring restarts at this group.
      done_.wait(lock, [&] {
        for (const Slot& s : slots_) {
          if (s.remaining > 0) return false;
        }
        return true;
      });
      for (Slot& s : slots_) s.group = -1;
      slot = 0;
      Queue(group, slot);
    }
  }
  // Top up the window: the streamed groups after this one, each into a slot that holds none of
  // the window and has no read in flight.
  const int ahead = depth() - 1;
  int64_t next = group;
  for (int a = 0; a < ahead; ++a) {
    next = NextStreamed(next);
    if (next == group) break;
    if (SlotOf(next) >= 0) continue;
    int free_slot = -1;
    for (size_t s = 0; s < slots_.size() && free_slot < 0; ++s) {
      const Slot& cand = slots_[s];
      if (cand.remaining > 0 || cand.group == group) continue;
      bool in_window = false;
      int64_t w = group;
      for (int b = 0; b < ahead && !in_window; ++b) {
        w = NextStreamed(w);
        in_window = cand.group == w;
      }
      if (!in_window) free_slot = static_cast<int>(s);
    }
    if (free_slot < 0) break;
    Queue(next, free_slot);
  }
  if (task_count_ > 0) {
    lock.unlock();  // the scheduler's lock comes before the ring's (io_scheduler.h)
    io_.Notify();
    lock.lock();
  }
  if (g.pinned) return Status::Ok();
  Slot& s = slots_[static_cast<size_t>(slot)];
  done_.wait(lock, [&] { return s.remaining == 0; });
  if (s.failed) {
    s.group = -1;  // nothing of a failed read is used: the next call reads the group again
    return Status::Error(s.error);
  }
  if (!s.counted) {
    s.counted = true;
    *bytes_read = g.bytes;
  }
  return Status::Ok();
}

void SpineRing::WillReadEmbeddingRows(std::span<const int32_t> tokens) {
  if (tokens.size() < 2) return;  // one row: its own fault reads it as soon
  for (const int32_t t : tokens) {
    AdviseWillNeed(
        reinterpret_cast<const uint8_t*>(embed_tokens_) + static_cast<size_t>(t) * embed_row_bytes_,
        embed_row_bytes_);
  }
}

const LayerWeights* SpineRing::ReadyLayer(int64_t i) {
  const Group& g = groups_[static_cast<size_t>(i)];
  if (g.pinned) return &layers_[static_cast<size_t>(i)];
  std::lock_guard<std::mutex> lock(mutex_);
  const int slot = SlotOf(i);
  if (slot < 0) return nullptr;
  const Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.remaining > 0 || s.failed) return nullptr;
  return &layers_[static_cast<size_t>(i)];
}

bool SpineRing::Take(IoPriority priority, int64_t* ticket) {
  if (priority != IoPriority::kSpine) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (task_count_ == 0) return false;
  const Task t = tasks_[task_head_];
  task_head_ = (task_head_ + 1) % tasks_.size();
  --task_count_;
  *ticket = (static_cast<int64_t>(t.slot) << 32) | t.chunk;
  return true;
}

void SpineRing::Run(int64_t ticket) {
  const auto slot = static_cast<size_t>(ticket >> 32);
  const auto chunk = static_cast<size_t>(ticket & 0xffffffff);
  Slot& s = slots_[slot];
  int64_t group = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    group = s.group;
  }
  const Group& g = groups_[static_cast<size_t>(group)];
  const Chunk& ch = g.chunks[chunk];
  const size_t room = s.capacity - static_cast<size_t>(ch.slot_offset);
  auto got = files_[static_cast<size_t>(ch.file)].ReadSpan(ch.offset, ch.bytes,
                                                           s.base + ch.slot_offset, room);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!got.ok() && !s.failed) {
    s.failed = true;
    s.error = "spine " + *ch.tensor + ": " + got.status().message();
  }
  if (--s.remaining == 0) done_.notify_all();
}

std::vector<SpineRing::StreamedRead> SpineRing::StreamedReads() const {
  std::vector<StreamedRead> out;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].pinned) continue;
    for (const Chunk& ch : groups_[g].chunks) {
      out.push_back({static_cast<int64_t>(g), ch.file, ch.offset, ch.bytes});
    }
  }
  return out;
}

Status SpineRing::ReadForProbe(const StreamedRead& read, uint8_t* buffer, size_t capacity) const {
  return files_[static_cast<size_t>(read.file)]
      .ReadSpan(read.offset, read.bytes, buffer, capacity)
      .status();
}

std::string SpineRing::Describe() const {
  std::ostringstream o;
  int pinned_layers = 0;
  bool lm_head_pinned = false;
  size_t streamed_groups = 0, extents = 0;  // how well the shard layout serves a group's read
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].pinned) {
      ++streamed_groups;
      extents += groups_[g].extents.size();
    } else if (static_cast<int64_t>(g) == tail_group()) {
      lm_head_pinned = true;
    } else {
      ++pinned_layers;
    }
  }
  o << "spine ring: " << pinned_layers << " of " << groups_.size() - 1 << " layers"
    << (lm_head_pinned ? " and the lm_head" : "") << " pinned (" << HumanBytes(pinned_bytes_)
    << "), " << HumanBytes(streamed_bytes_) << " streamed per token through " << depth()
    << " slots of " << HumanBytes(slot_bytes_) << " (" << ReadModeName(read_mode_) << " reads";
  if (streamed_groups > 0) {
    o << ", " << extents << " contiguous runs for " << streamed_groups << " groups";
  }
  o << ")";
  return o.str();
}

}  // namespace deltafin
