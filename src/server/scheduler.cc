// Scheduler: the engine worker thread, its FIFO queue, and conversation state reuse.
#include "server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "base/log.h"
#include "deltafin/generator.h"

namespace deltafin::server {

namespace {
using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The job's constraint as the driver's TokenConstraint; its closing also marks the job, whose
// answer then reports that the budget ended it.
class JobConstraint final : public TokenConstraint {
 public:
  explicit JobConstraint(Job& job) : job_(job), c_(*job.constraint) {}
  bool Active() const override { return c_.Active(); }
  bool Ended() const override { return c_.Ended(); }
  int64_t Mask(std::span<uint8_t> allowed) override { return c_.Mask(allowed); }
  bool Accept(int32_t token) override { return c_.Accept(token); }
  int64_t CloseCost() override { return c_.CloseCost(); }
  int64_t CloseCostAfter(int32_t token) override { return c_.CloseCostAfter(token); }
  void BeginClosing() override {
    c_.BeginClosing();
    std::lock_guard lock(job_.mu);
    job_.budget_closed = true;
  }
  bool closing() const override { return c_.closing(); }

 private:
  Job& job_;
  constrain::TokenConstraint& c_;
};

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
      session_(engine.NewSession()) {
  GeneratorOptions options;
  if (draft_max > 0) options.drafter = std::make_shared<NgramDrafter>();
  options.speculate.draft_max = draft_max;
  generator_ = std::make_unique<Generator>(session_.get(), engine.info(), std::move(options));
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
    // A client that leaves stops the wave within one routed expert's work, not at its end.
    session_->SetInterrupt(&job.cancelled);
    Status st = session_->Prefill(std::span<const int32_t>(prompt.data() + pos, n), wave);
    session_->SetInterrupt(nullptr);
    PublishStats();
    if (IsInterrupted(st)) {  // the session was reset
      fed_.clear();
      metrics_->AddPrompt(static_cast<int64_t>(prompt.size()), static_cast<int64_t>(reuse),
                          Seconds(t0));
      metrics_->CountCancelled();
      return EndRunningJob(job, Job::End::kCancelled);
    }
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
  // Hands each token to the reader with the engine work since the previous hand-off (a verify
  // pass's work goes with its first token, its other tokens carry none; the first token's with
  // the prefill's), its logprob when asked for, and asks the driver to stop once the reader has
  // all it needs or the client is gone.
  class ToReader final : public GenerationCallbacks {
   public:
    ToReader(Scheduler& s, Job& job, size_t reuse, const SessionStats& before,
             Clock::time_point since)
        : s_(s), job_(job), reuse_(reuse), prefill_before_(before), since_(since) {}
    void OnStep(const GenerationStep& step) override {
      s_.PublishStats();
      if (s_.generator_->speculated()) {
        s_.metrics_->AddSpeculation(step.pass.rows, step.pass.drafted, step.pass.accepted);
      }
      const SessionStats delta =
          step.index == 0 ? StatsSince(s_.session_->stats(), prefill_before_) : step.delta;
      timing_ = {};
      timing_.wall_s = Seconds(since_);
      timing_.io_wait_s = delta.io_wait_seconds;
      timing_.compute_s = delta.compute_seconds;
      timing_.expert_bytes_read = delta.expert_bytes_read;
      timing_.experts_needed = delta.expert_loads;
      timing_.experts_in_ram = delta.expert_cache_hits;
      timing_.positions = static_cast<int64_t>(delta.positions);
      since_ = Clock::now();
    }
    bool OnToken(int32_t token, std::span<const float> logits) override {
      TokenLogprob logprob;
      if (job_.top_logprobs >= 0) ComputeLogprob(logits, token, job_.top_logprobs, &logprob);
      {
        std::lock_guard lock(job_.mu);
        job_.tokens.push_back(token);
        job_.steps.push_back(timing_);
        if (job_.top_logprobs >= 0) job_.logprobs.push_back(logprob);
      }
      timing_ = {};
      job_.cv.notify_all();
      // The whole prompt's state, once its first token is with the reader (Logits() still hold
      // it).
      if (first_ && s_.cache_ != nullptr && reuse_ < job_.prompt.size()) s_.Snapshot(job_.prompt);
      first_ = false;
      return !job_.cancelled.load() && !job_.stop_requested.load();
    }

   private:
    Scheduler& s_;
    Job& job_;
    const size_t reuse_;
    const SessionStats prefill_before_;
    Clock::time_point since_;
    StepTiming timing_;
    bool first_ = true;
  };

  std::optional<JobConstraint> constraint;
  if (job.constraint) constraint.emplace(job);
  const int32_t eos = static_cast<int32_t>(engine_.info().eos_token_id);
  GenerationParams params;
  params.sampling = job.sampling;
  params.max_tokens = job.max_tokens;
  params.end_tokens = {&eos, 1};
  params.constraint = constraint ? &*constraint : nullptr;
  ToReader reader(*this, job, reuse, before, since);
  const GenerationResult result = generator_->Generate(job.prompt, params, reader);
  *generated = result.tokens;
  if (result.reason == FinishReason::kError) {
    // The session's state is unknown after a failed pass: the next job starts afresh.
    session_->Reset();
    fed_.clear();
    *error = result.status.message();
    return Job::End::kError;
  }
  // What the session now holds, for the next job's reuse check: tokens a verify pass drew past the
  // end are in it too (the next prompt then does not match, and the session starts afresh).
  const std::span<const int32_t> fed = generator_->fed();
  fed_.insert(fed_.end(), fed.begin(), fed.end());
  switch (result.reason) {
    case FinishReason::kLength:
    case FinishReason::kContext:
      return Job::End::kLength;
    case FinishReason::kStopped:
      return job.IsCancelled() ? Job::End::kCancelled : Job::End::kEos;
    default:
      return Job::End::kEos;  // EOS, or the constraint's output complete
  }
}

}  // namespace deltafin::server
