// Encode/decode drivers, the Kimi splitting rule, and the parallel ordinary-text path.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <thread>

#include "io/mapped_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {

std::vector<Span> KimiSplit(std::string_view text, size_t max_chars, size_t max_run) {
  std::vector<Span> spans;
  size_t pos = 0;
  while (pos < text.size()) {
    // One slice of at most max_chars code points; within it, the run rule
    // (_split_whitespaces_or_nonwhitespaces): a run longer than max_run is cut before the
    // character that would make it max_run + 1 long.
    size_t slice_start = pos, chars = 0, run = 0;
    bool run_is_space = false;
    while (pos < text.size() && chars < max_chars) {
      const size_t at = pos;
      const bool space = IsPythonSpace(NextCodePoint(text, &pos));
      if (chars == 0) run_is_space = space;  // Python seeds the state from s[0]
      if (space != run_is_space) {
        run = 1;
        run_is_space = space;
      } else if (++run > max_run) {
        spans.push_back({slice_start, at});
        slice_start = at;
        run = 1;
      }
      ++chars;
    }
    spans.push_back({slice_start, pos});
  }
  return spans;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocab vocab, PatternKind pattern) {
  return Create(std::move(vocab), pattern, InputSplit::kNone);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(Vocab vocab, PatternKind pattern,
                                                     InputSplit split) {
  DF_ASSIGN_OR_RETURN(auto pre, PreTokenizer::Create(pattern));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(vocab), std::move(pre), split));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::LoadModelDir(const std::string& dir) {
  DF_ASSIGN_OR_RETURN(Vocab vocab, Vocab::LoadTiktoken(dir + "/tiktoken.model"));
  const std::string config_path = dir + "/tokenizer_config.json";
  DF_ASSIGN_OR_RETURN(std::string config, ReadFileToString(config_path));
  DF_RETURN_IF_ERROR(vocab.LoadSpecialsFromConfig(config, config_path));
  return Create(std::move(vocab), PatternKind::kK3, InputSplit::kKimi);
}

int32_t Tokenizer::SpecialId(std::string_view content) const {
  const uint32_t id = vocab_.SpecialId(content);
  return id == kNoRank ? -1 : static_cast<int32_t>(id);
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                               const EncodeOptions& options) const {
  DF_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 16);
  if (split_ == InputSplit::kNone) {
    DF_RETURN_IF_ERROR(EncodeSpan(text, options, &out));
    return out;
  }
  for (const Span& s : KimiSplit(text)) {
    DF_RETURN_IF_ERROR(EncodeSpan(text.substr(s.begin, s.end - s.begin), options, &out));
  }
  return out;
}

Status Tokenizer::EncodeSpan(std::string_view text, const EncodeOptions& options,
                             std::vector<int32_t>* out) const {
  const bool any_special = options.allow_all_special || !options.allowed_special.empty();
  if (!any_special) return EncodeOrdinary(text, options.threads, out);
  // Leftmost special spelling wins; at one position the longest (spellings are meant to be
  // prefix-free, docs/MODEL.md §5.3, so this only fixes a rule for odd vocabularies).
  std::vector<const SpecialToken*> allowed;
  for (const SpecialToken& s : vocab_.specials()) {
    if (options.allow_all_special ||
        std::find(options.allowed_special.begin(), options.allowed_special.end(), s.content) !=
            options.allowed_special.end()) {
      allowed.push_back(&s);
    }
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t best_pos = std::string_view::npos;
    const SpecialToken* best = nullptr;
    for (const SpecialToken* s : allowed) {
      const size_t at = text.find(s->content, start);
      if (at == std::string_view::npos) continue;
      if (at < best_pos || (at == best_pos && s->content.size() > best->content.size())) {
        best_pos = at;
        best = s;
      }
    }
    const size_t stop = best ? best_pos : text.size();
    DF_RETURN_IF_ERROR(EncodeOrdinary(text.substr(start, stop - start), options.threads, out));
    if (!best) break;
    out->push_back(static_cast<int32_t>(best->id));
    start = best_pos + best->content.size();
  }
  return Status::Ok();
}

Status Tokenizer::EncodeOrdinary(std::string_view text, int threads,
                                 std::vector<int32_t>* out) const {
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Below ~64 KiB per thread the thread start-up costs more than it saves.
  if (threads > 1 && text.size() >= size_t{65536} * 2) return EncodeParallel(text, threads, out);
  const RankMap& ranks = vocab_.ranks();
  return pre_->ForEachPiece(text, 0, [&](size_t b, size_t e) {
    EncodePiece(text.substr(b, e - b), ranks, out);
    return true;
  });
}

// Parallel path. Worker k scans from an arbitrary start s_k (a character boundary) to just past
// s_{k+1}. A scan's next match depends only on where its search starts, so once the sequential
// scan and worker k's scan share a search start, they produce the same pieces from there on. The
// join therefore extends the result sequentially from where worker k-1 ended until it reaches a
// search start of worker k (usually at once), and then takes worker k's pieces. The ids are
// exactly those of a single-threaded scan, by construction.
Status Tokenizer::EncodeParallel(std::string_view text, int threads,
                                 std::vector<int32_t>* out) const {
  const size_t n = text.size();
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), n / 65536));
  std::vector<size_t> starts(static_cast<size_t>(threads) + 1);
  for (int k = 0; k <= threads; ++k) {
    size_t s = n * static_cast<size_t>(k) / static_cast<size_t>(threads);
    while (s < n && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) ++s;
    starts[static_cast<size_t>(k)] = s;
  }
  struct Work {
    std::vector<size_t> ends;     // end of each piece (= the next search start)
    std::vector<size_t> id_ends;  // ids[0..id_ends[j]) cover pieces 0..j
    std::vector<int32_t> ids;
    Status status;
  };
  std::vector<Work> work(static_cast<size_t>(threads));
  const RankMap& ranks = vocab_.ranks();
  auto run = [&](size_t k) {
    Work& w = work[k];
    const size_t stop = starts[k + 1];
    w.status = pre_->ForEachPiece(text, starts[k], [&](size_t b, size_t e) {
      EncodePiece(text.substr(b, e - b), ranks, &w.ids);
      w.ends.push_back(e);
      w.id_ends.push_back(w.ids.size());
      return e < stop || k + 1 == work.size();
    });
  };
  std::vector<std::thread> pool;
  for (size_t k = 1; k < work.size(); ++k) pool.emplace_back(run, k);
  run(0);
  for (auto& t : pool) t.join();
  for (const Work& w : work) DF_RETURN_IF_ERROR(w.status);

  out->insert(out->end(), work[0].ids.begin(), work[0].ids.end());
  size_t pos = work[0].ends.empty() ? n : work[0].ends.back();
  void* md = pre_->NewMatchData();
  if (md == nullptr) return Status::Error("pcre2: out of memory");
  Status status;
  for (size_t k = 1; k < work.size() && pos < n; ++k) {
    const Work& w = work[k];
    const size_t last = w.ends.empty() ? starts[k] : w.ends.back();
    while (pos < last) {
      // Is `pos` one of worker k's search starts (s_k or the end of one of its pieces)?
      if (pos == starts[k]) {
        out->insert(out->end(), w.ids.begin(), w.ids.end());
        pos = last;
        break;
      }
      const auto it = std::lower_bound(w.ends.begin(), w.ends.end(), pos);
      if (it != w.ends.end() && *it == pos) {
        const size_t j = static_cast<size_t>(it - w.ends.begin());
        out->insert(out->end(), w.ids.begin() + static_cast<ptrdiff_t>(w.id_ends[j]), w.ids.end());
        pos = last;
        break;
      }
      size_t b = 0, e = 0;
      const int rc = pre_->Next(text, pos, md, &b, &e);
      if (rc < 0)
        status =
            Status::Error("pre-tokenizer: PCRE2 match failed near byte " + std::to_string(pos));
      if (rc <= 0) {
        pos = n;
        break;
      }
      EncodePiece(text.substr(b, e - b), ranks, out);
      pos = e;
    }
  }
  PreTokenizer::FreeMatchData(md);
  return status;
}

Result<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string_view bytes;
    if (ids[i] < 0 || !vocab_.IdBytes(static_cast<uint32_t>(ids[i]), &bytes)) {
      return Status::Error("token " + std::to_string(i) + ": id " + std::to_string(ids[i]) +
                           " is not in the vocabulary");
    }
    out.append(bytes);
  }
  return out;
}

}  // namespace deltafin::tokenizer
