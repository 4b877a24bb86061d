// Scheduler: the engine worker thread, its FIFO queue, and conversation state reuse.
#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/log.h"
#include "deltafin/sampler.h"
#include "deltafin/speculate.h"

namespace deltafin::server {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The step from `before` (stats and time at the previous token) to now.
StepTiming StepSince(const SessionStats& before, Clock::time_point since, const SessionStats& now) {
  StepTiming t;
  t.wall_s = Seconds(since);
  t.io_wait_s = now.io_wait_seconds - before.io_wait_seconds;
  t.compute_s = now.compute_seconds - before.compute_seconds;
  t.expert_bytes_read = now.expert_bytes_read - before.expert_bytes_read;
  t.experts_needed = now.expert_loads - before.expert_loads;
  t.experts_in_ram = now.expert_cache_hits - before.expert_cache_hits;
  t.positions = static_cast<int64_t>(now.positions - before.positions);
  return t;
}
}  // namespace

void ComputeLogprob(std::span<const float> logits, int32_t token, int k, TokenLogprob* out) {
  // log-softmax in double: log p(i) = l(i) - (max + log sum exp(l - max)).
  float max = -INFINITY;
  for (float l : logits) max = std::max(max, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = static_cast<double>(max) + std::log(sum);
  auto lp = [&](size_t i) { return static_cast<float>(static_cast<double>(logits[i]) - log_z); };
  out->logprob = token >= 0 && static_cast<size_t>(token) < logits.size()
                     ? lp(static_cast<size_t>(token))
                     : -INFINITY;
  k = std::clamp(k, 0, TokenLogprob::kMaxTop);
  out->n = 0;
  // The top k by insertion: ids ascend, and a later id goes after an equal logit.
  for (size_t i = 0; i < logits.size() && k > 0; ++i) {
    const float l = logits[i];
    if (out->n == k && !(l > logits[static_cast<size_t>(out->top_ids[out->n - 1])])) continue;
    int32_t j = out->n < k ? out->n++ : k - 1;
    while (j > 0 && l > logits[static_cast<size_t>(out->top_ids[j - 1])]) {
      out->top_ids[j] = out->top_ids[j - 1];
      --j;
    }
    out->top_ids[j] = static_cast<int32_t>(i);
  }
  for (int32_t j = 0; j < out->n; ++j)
    out->top_logprobs[j] = lp(static_cast<size_t>(out->top_ids[j]));
}

Scheduler::Scheduler(const Engine& engine, int max_queue, int64_t prefill_piece, Metrics* metrics,
                     PrefixCache* cache, int64_t draft_max)
    : engine_(engine),
      max_queue_(max_queue),
      prefill_piece_(std::max<int64_t>(1, prefill_piece)),
      metrics_(metrics),
      cache_(cache),
      draft_max_(draft_max),
      session_(engine.NewSession()) {
  if (draft_max_ > 0 && session_->max_verify_rows() > 1) {
    SpeculateOptions options;
    options.draft_max = draft_max_;
    speculator_ = std::make_unique<Speculator>(session_.get(), &drafter_, options,
                                               engine.info().context_capacity);
    pass_tokens_.reserve(static_cast<size_t>(draft_max_) + 1);
  }
  worker_ = std::thread([this] { Run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& job : queue_) job->Cancel();
  }
  cv_.notify_all();
  worker_.join();
  for (auto& job : queue_) Finish(*job, Job::End::kCancelled);
}

bool Scheduler::Submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mu_);
    // An idle worker takes the job at once, so it does not count against the queue.
    const int room = max_queue_ + (busy_ || !queue_.empty() ? 0 : 1);
    if (stopping_ || static_cast<int>(queue_.size()) >= room) return false;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return true;
}

void Scheduler::Cancel(const std::shared_ptr<Job>& job) {
  job->Cancel();
  bool removed = false;
  {
    std::lock_guard lock(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) {
      queue_.erase(it);
      removed = true;
    }
  }
  if (removed) {
    metrics_->CountCancelled();
    Finish(*job, Job::End::kCancelled);
  }
}

int Scheduler::queued() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(queue_.size());
}

void Scheduler::Run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    metrics_->SetRunning(true);
    Process(*job);  // ends with EndRunningJob
  }
}

void Scheduler::EndRunningJob(Job& job, Job::End end, const std::string& error) {
  // The worker is idle before the job's reader hears of the end: a client that sends its next
  // request as soon as it has this answer must find the worker free (Submit's room), not busy.
  metrics_->SetRunning(false);
  {
    std::lock_guard lock(mu_);
    busy_ = false;
  }
  Finish(job, end, error);
}

void Scheduler::Finish(Job& job, Job::End end, const std::string& error) {
  {
    std::lock_guard lock(job.mu);
    job.end = end;
    job.error = error;
  }
  job.cv.notify_all();
}

void Scheduler::PublishStats() { metrics_->SetSessionStats(session_->stats()); }

void Scheduler::Snapshot(std::span<const int32_t> prefix) {
  if (cache_ == nullptr || prefix.size() < std::max<size_t>(1, cache_->min_tokens()) ||
      cache_->Contains(prefix)) {
    return;
  }
  std::vector<uint8_t> state;
  Status st = session_->SaveState(&state);
  if (!st.ok()) {
    LogWarn("prefix cache: snapshot failed: " + st.message());
    return;
  }
  cache_->Insert(prefix, std::move(state));
}

void Scheduler::Process(Job& job) {
  auto should_end = [&] { return job.cancelled.load() || job.stop_requested.load(); };
  if (job.IsCancelled()) {
    metrics_->CountCancelled();
    return EndRunningJob(job, Job::End::kCancelled);
  }
  {
    std::lock_guard lock(job.mu);
    job.started = true;
  }
  job.cv.notify_all();
  const std::vector<int32_t>& prompt = job.prompt;
  size_t reuse = 0;
  // Prompt logprobs need every prompt position's logits: no reuse, the whole prompt is prefilled.
  if (!job.want_prompt_logprobs && !fed_.empty() && fed_.size() < prompt.size() &&
      std::equal(fed_.begin(), fed_.end(), prompt.begin())) {
    reuse = fed_.size();
  } else {
    session_->Reset();
    fed_.clear();
  }
  if (cache_ != nullptr && !job.want_prompt_logprobs) {
    PrefixCache::Hit hit = cache_->Lookup(prompt);
    if (hit.tokens > reuse) {
      Status st = session_->RestoreState(*hit.state);
      if (st.ok()) {
        reuse = hit.tokens;
        fed_.assign(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(reuse));
      } else {
        LogWarn("prefix cache: restore failed (" + st.message() + "); prefilling instead");
        session_->Reset();
        fed_.clear();
        reuse = 0;
      }
    }
  }
  metrics_->CountReuse(reuse > 0);
  // Room for the tokens and their timings up front, so that most answers never regrow them.
  {
    const size_t expect = static_cast<size_t>(std::min<int64_t>(job.max_tokens, 4096));
    std::lock_guard lock(job.mu);
    job.tokens.reserve(expect);
    job.steps.reserve(expect);
    if (job.top_logprobs >= 0) job.logprobs.reserve(expect);
  }
  SessionStats step_stats = session_->stats();
  const auto t0 = Clock::now();
  auto point = std::upper_bound(job.cache_points.begin(), job.cache_points.end(), reuse);
  for (size_t pos = reuse, n = 0; pos < prompt.size(); pos += n) {
    if (should_end()) {
      metrics_->AddPrompt(static_cast<int64_t>(prompt.size()), static_cast<int64_t>(reuse),
                          Seconds(t0));
      if (job.IsCancelled()) metrics_->CountCancelled();
      return EndRunningJob(job, job.IsCancelled() ? Job::End::kCancelled : Job::End::kEos);
    }
    n = std::min(prompt.size() - pos, static_cast<size_t>(prefill_piece_));
    if (cache_ != nullptr && point != job.cache_points.end() && *point < prompt.size()) {
      n = std::min(n, *point - pos);  // stop at the cache point to snapshot there
    }
    std::span<float> wave;
    if (job.want_prompt_logprobs) {
      wave_logits_.resize(n * static_cast<size_t>(engine_.info().vocab_size));
      wave = wave_logits_;
    }
    Status st = session_->Prefill(std::span<const int32_t>(prompt.data() + pos, n), wave);
    PublishStats();
    if (!st.ok()) {
      session_->Reset();
      fed_.clear();
      return EndRunningJob(job, Job::End::kError, st.message());
    }
    fed_.insert(fed_.end(), prompt.begin() + static_cast<ptrdiff_t>(pos),
                prompt.begin() + static_cast<ptrdiff_t>(pos + n));
    if (job.want_prompt_logprobs) {
      // Row i holds the logits after prompt[pos + i]: they score prompt[pos + i + 1].
      const size_t vocab = static_cast<size_t>(engine_.info().vocab_size);
      for (size_t i = 0; i < n && pos + i + 1 < prompt.size(); ++i) {
        TokenLogprob lp;
        ComputeLogprob({wave_logits_.data() + i * vocab, vocab}, prompt[pos + i + 1],
                       job.prompt_top, &lp);
        job.prompt_logprobs.push_back(lp);  // read by the reader only after `prefilled`
      }
    }
    if (cache_ != nullptr && point != job.cache_points.end() && pos + n == *point) {
      Snapshot(std::span<const int32_t>(prompt.data(), pos + n));
      ++point;
    }
  }
  const double prefill_s = Seconds(t0);
  metrics_->AddPrompt(static_cast<int64_t>(prompt.size()), static_cast<int64_t>(reuse), prefill_s);
  {
    std::lock_guard lock(job.mu);
    job.prefilled = true;
    job.cached_tokens = static_cast<int64_t>(reuse);
    job.prefill_seconds = prefill_s;
  }
  const auto t1 = Clock::now();
  int64_t generated = 0;
  std::string error;
  const Job::End end = Generate(job, reuse, step_stats, t0, &generated, &error);
  metrics_->AddDecode(generated, Seconds(t1));
  if (end == Job::End::kCancelled) metrics_->CountCancelled();
  EndRunningJob(job, end, error);
}

Job::End Scheduler::Generate(Job& job, size_t reuse, const SessionStats& before,
                             Clock::time_point since, int64_t* generated, std::string* error) {
  auto should_end = [&] { return job.cancelled.load() || job.stop_requested.load(); };
  const std::vector<int32_t>& prompt = job.prompt;
  const ModelInfo& info = engine_.info();
  Sampler sampler(job.sampling);
  sampler.SetPrompt(prompt);  // the repetition penalty's window starts in the prompt
  SessionStats step_stats = before;
  auto step_start = since;
  // Hands one token to the reader with the engine work since the previous hand-off (a verify
  // pass's work goes with its first token, its other tokens carry none). Returns true when the
  // answer ends here (EOS, length, context, cancelled, stop).
  Job::End end = Job::End::kLength;
  TokenLogprob logprob;  // the next token's, when the job asks for logprobs
  auto emit = [&](int32_t next, bool first_of_pass) {
    StepTiming step;
    if (first_of_pass) {
      const SessionStats& now = session_->stats();
      step = StepSince(step_stats, step_start, now);
      step_stats = now;
      step_start = Clock::now();
    }
    {
      std::lock_guard lock(job.mu);
      job.tokens.push_back(next);
      job.steps.push_back(step);
      if (job.top_logprobs >= 0) job.logprobs.push_back(logprob);
    }
    job.cv.notify_all();
    // The whole prompt's state, once its first token is with the reader (Logits() still hold it).
    if (*generated == 0 && cache_ != nullptr && reuse < prompt.size()) Snapshot(prompt);
    ++*generated;
    if (next == info.eos_token_id) {
      end = Job::End::kEos;
      return true;
    }
    if (*generated >= job.max_tokens || session_->position() >= info.context_capacity) return true;
    if (should_end()) {
      end = job.IsCancelled() ? Job::End::kCancelled : Job::End::kEos;
      return true;
    }
    return false;
  };
  auto fail = [&](const Status& st) {
    session_->Reset();
    fed_.clear();
    *error = st.message();
    return Job::End::kError;
  };

  const bool speculate = speculator_ != nullptr && !job.constraint && job.top_logprobs < 0 &&
                         (job.sampling.temperature <= 0 || !job.sampling.seed);
  if (speculate) {
    // The drafter's context: the prompt (earlier turns included) and the answer.
    speculator_->Start(prompt);
    std::vector<int32_t>& tokens = pass_tokens_;
    // The Speculator has fed the session every token it emitted except the last: fed_ follows,
    // including tokens verified past an EOS or the length limit that the reader never sees (the
    // next job's reuse check then finds the session is not a prefix of its prompt).
    bool have_pending = false;
    int32_t pending = 0;
    for (;;) {
      Status st = speculator_->Step(sampler, job.max_tokens - *generated, &tokens);
      PublishStats();
      if (!st.ok()) return fail(st);
      const SpeculativePass& pass = speculator_->last_pass();
      metrics_->AddSpeculation(pass.rows, pass.drafted, pass.accepted);
      for (int32_t t : tokens) {
        if (have_pending) fed_.push_back(pending);
        pending = t;
        have_pending = true;
      }
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (emit(tokens[i], i == 0)) return end;
      }
    }
  }

  std::vector<uint8_t> allowed;  // the constraint's mask, reused for every token
  if (job.constraint) allowed.resize(static_cast<size_t>(info.vocab_size));
  for (;;) {
    int32_t next = -1;
    constrain::TokenConstraint* c = job.constraint.get();
    if (c != nullptr && c->Active()) {
      next = ConstrainedDraw(job, sampler, allowed, job.max_tokens - *generated);
      if (next < 0) {
        *error = "constrained decoding: no token of the vocabulary continues the output";
        return Job::End::kError;
      }
    } else {
      next = sampler.Sample(session_->Logits());
      if (c != nullptr) c->Accept(next);  // free: the constraint only follows
    }
    if (job.top_logprobs >= 0) ComputeLogprob(session_->Logits(), next, job.top_logprobs, &logprob);
    if (emit(next, true)) return end;
    if (c != nullptr && c->Ended()) return Job::End::kEos;
    Status st = session_->Decode(next);
    PublishStats();
    if (!st.ok()) return fail(st);
    fed_.push_back(next);
  }
}

// One constrained token within the budget (docs/SERVER.md "Budget-aware closing"). `budget` =
// tokens the answer may still take, this one included. The invariant is CloseCost() <= budget:
// a drawn token is kept only when its shortest ending still fits in the tokens after it (else it
// is taken out of the mask and the draw repeats, which is the same distribution restricted to
// the tokens that fit); when the shortest ending takes the whole budget, it is emitted as is.
int32_t Scheduler::ConstrainedDraw(Job& job, Sampler& sampler, std::vector<uint8_t>& allowed,
                                   int64_t budget) {
  constrain::TokenConstraint& c = *job.constraint;
  auto close = [&] {
    c.BeginClosing();
    std::lock_guard lock(job.mu);
    job.budget_closed = true;
  };
  const int64_t cost = c.closing() ? -1 : c.CloseCost();
  if (cost >= 0 && cost >= budget) close();
  int32_t next = -1;
  if (c.Mask(allowed) > 0) {
    for (;;) {
      next = sampler.Peek(session_->Logits(), allowed);
      if (next < 0 || c.closing() || cost < 0) break;
      const int64_t after = c.CloseCostAfter(next);
      if (after >= 0 && after <= budget - 1) break;
      allowed[static_cast<size_t>(next)] = 0;  // its shortest ending no longer fits
    }
  }
  if (next < 0 && !c.closing() && cost >= 0) {
    // No drawn token fits: the shortest ending does (CloseCost() <= budget).
    close();
    if (c.Mask(allowed) > 0) next = sampler.Peek(session_->Logits(), allowed);
  }
  if (next < 0 || !c.Accept(next)) return -1;
  sampler.Record(next);
  return next;
}

}  // namespace deltafin::server
