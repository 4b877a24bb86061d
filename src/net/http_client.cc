#include "net/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <thread>

#include "base/log.h"

namespace deltafin::net {

namespace {

std::once_flag g_curl_init;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

double ParseRetryAfter(const std::string& value) {
  if (value.empty()) return -1;
  if (value.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<double>(std::strtoull(value.c_str(), nullptr, 10));
  }
  const time_t when = curl_getdate(value.c_str(), nullptr);
  if (when < 0) return -1;
  return std::max(0.0, std::difftime(when, std::time(nullptr)));
}

std::string AuthHelp() {
  return "the endpoint needs a Hugging Face access token that can read this repository: set "
         "HF_TOKEN=hf_..., or pass --token hf_..., or save it in $HF_HOME/token "
         "(~/.cache/huggingface/token, as `huggingface-cli login` does); create one at "
         "<endpoint>/settings/tokens and accept the model's license on its page first";
}

struct HttpClient::Handle {
  CURL* curl = nullptr;
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

namespace {

// Per-request state shared with libcurl's callbacks.
struct Attempt {
  CURL* curl = nullptr;
  long status = 0;  // known from the first body byte on
  std::string etag, content_range, retry_after;
  uint64_t content_length = 0;
  uint64_t range_start = 0;  // first byte of the resource this request asked for
  uint64_t skip = 0;         // bytes to drop (a server that answered 200 to a Range request)
  uint64_t limit = 0;        // body bytes wanted in all (0: unlimited); extra bytes are dropped
  const BodySink* sink = nullptr;
  std::string* text = nullptr;
  uint64_t* delivered = nullptr;
  const ProgressFn* progress = nullptr;
  const std::string* expect_etag = nullptr;
  std::string* seen_etag = nullptr;  // set to the response's ETag before the first body byte
  std::string error_body;
  Status sink_status;
  bool etag_mismatch = false;
  bool started_body = false;
};

}  // namespace

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  endpoint_origin_ = Origin(options_.endpoint);
}

HttpClient::~HttpClient() = default;

std::string HttpClient::Origin(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  const std::string scheme = Lower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return "";
  const size_t host_begin = scheme_end + 3;
  size_t host_end = url.find_first_of("/?#", host_begin);
  if (host_end == std::string::npos) host_end = url.size();
  std::string authority = Lower(url.substr(host_begin, host_end - host_begin));
  const size_t at = authority.rfind('@');
  if (at != std::string::npos) authority = authority.substr(at + 1);
  // Port: after the last ':' unless that colon is inside an IPv6 literal.
  const size_t colon = authority.rfind(':');
  const size_t bracket = authority.rfind(']');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
    authority += scheme == "https" ? ":443" : ":80";
  }
  return scheme + "://" + authority;
}

std::string HttpClient::ResolveLocation(const std::string& base, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  const std::string origin_part = [&] {
    const size_t s = base.find("://");
    const size_t e = base.find_first_of("/?#", s + 3);
    return e == std::string::npos ? base : base.substr(0, e);
  }();
  if (location.rfind("//", 0) == 0) return base.substr(0, base.find("://") + 1) + location;
  if (!location.empty() && location[0] == '/') return origin_part + location;
  std::string dir = base.substr(0, base.find_first_of("?#"));
  dir = dir.substr(0, dir.rfind('/') + 1);
  return dir + location;
}

std::unique_ptr<HttpClient::Handle> HttpClient::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const int limit = std::max(1, options_.max_connections);
  cv_.wait(lock, [&] { return !idle_.empty() || outstanding_ < limit; });
  ++outstanding_;
  if (!idle_.empty()) {
    auto h = std::move(idle_.back());
    idle_.pop_back();
    return h;
  }
  auto h = std::make_unique<Handle>();
  h->curl = curl_easy_init();
  return h;
}

void HttpClient::Release(std::unique_ptr<Handle> handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --outstanding_;
    idle_.push_back(std::move(handle));
  }
  cv_.notify_one();
}

namespace {

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* a = static_cast<Attempt*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after 1xx or a redirect): start over
    a->etag.clear();
    a->content_range.clear();
    a->retry_after.clear();
    a->content_length = 0;
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  const std::string name = Lower(Trim(line.substr(0, colon)));
  const std::string value = Trim(line.substr(colon + 1));
  if (name == "etag") a->etag = value;
  if (name == "content-range") a->content_range = value;
  if (name == "retry-after") a->retry_after = value;
  if (name == "content-length") a->content_length = std::strtoull(value.c_str(), nullptr, 10);
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* a = static_cast<Attempt*>(user);
  size_t bytes = size * n;
  if (a->status == 0) {
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &a->status);
    if (a->status == 200 && a->range_start > 0) a->skip = a->range_start;
  }
  if (a->status >= 300) {  // redirect or error: keep a little of an error body for the message
    if (a->status >= 400 && a->error_body.size() < 512) {
      a->error_body.append(data, std::min(bytes, 512 - a->error_body.size()));
    }
    return bytes;
  }
  if (!a->started_body) {
    a->started_body = true;
    if (a->expect_etag != nullptr && !a->expect_etag->empty() && !a->etag.empty() &&
        a->etag != *a->expect_etag) {
      a->etag_mismatch = true;
      return 0;
    }
    if (a->seen_etag != nullptr) *a->seen_etag = a->etag;
  }
  const size_t total = bytes;
  const char* p = data;
  if (a->skip > 0) {
    const size_t drop = static_cast<size_t>(std::min<uint64_t>(a->skip, bytes));
    a->skip -= drop;
    p += drop;
    bytes -= drop;
  }
  if (a->limit > 0)
    bytes = static_cast<size_t>(
        std::min<uint64_t>(bytes, a->limit - std::min(a->limit, *a->delivered)));
  if (bytes == 0) return total;
  if (a->text != nullptr) {
    a->text->append(p, bytes);
  } else if (a->sink != nullptr) {
    a->sink_status = (*a->sink)(reinterpret_cast<const uint8_t*>(p), bytes, *a->delivered);
    if (!a->sink_status.ok()) return 0;
  }
  *a->delivered += bytes;
  if (a->progress != nullptr && *a->progress) (*a->progress)(bytes);
  return total;
}

std::string StatusText(long status) {
  switch (status) {
    case 401:
      return "401 Unauthorized";
    case 403:
      return "403 Forbidden";
    case 404:
      return "404 Not Found";
    case 416:
      return "416 Range Not Satisfiable";
    case 429:
      return "429 Too Many Requests";
    default:
      return std::to_string(status);
  }
}

// libcurl errors that mean no connection to the host was ever made.
bool NeverConnected(CURLcode rc, CURL* c) {
  if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
      rc == CURLE_COULDNT_CONNECT) {
    return true;
  }
  curl_off_t connect_us = 0;
  curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &connect_us);
  return rc == CURLE_OPERATION_TIMEDOUT && connect_us == 0;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

bool HttpClient::HasAnswered(const std::string& origin) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::find(answered_origins_.begin(), answered_origins_.end(), origin) !=
         answered_origins_.end();
}

void HttpClient::MarkAnswered(const std::string& origin) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(answered_origins_.begin(), answered_origins_.end(), origin) ==
      answered_origins_.end()) {
    answered_origins_.push_back(origin);
  }
}

Result<double> HttpClient::RetryDelay(const Status& s, int failures, const HttpResponse& r) const {
  double backoff = options_.backoff_seconds;
  for (int i = 1; i < failures; ++i) backoff = std::min(backoff * 2, 16.0);
  if (r.retry_after_seconds > kMaxRetryAfterSeconds) {
    return Status::Error(s.message() + "; the server asks to wait " +
                         Seconds(r.retry_after_seconds) +
                         " before retrying (Retry-After), longer than deltafin waits (" +
                         Seconds(kMaxRetryAfterSeconds) + "): run the same command again later");
  }
  return std::max(backoff, r.retry_after_seconds);
}

Status HttpClient::Perform(Handle* h, const std::string& url0, uint64_t begin, uint64_t length,
                           const BodySink* sink, std::string* text, uint64_t* delivered,
                           HttpResponse* response, const ProgressFn* progress, bool* retryable) {
  *retryable = false;
  std::string url = url0;
  const std::string expect = response != nullptr ? response->etag : "";
  for (int hop = 0; hop <= 10; ++hop) {
    CURL* c = h->curl;
    curl_easy_reset(c);  // keeps live connections
    Attempt a;
    a.curl = c;
    a.sink = sink;
    a.text = text;
    a.delivered = delivered;
    a.progress = progress;
    a.expect_etag = &expect;
    a.seen_etag = response != nullptr ? &response->etag : nullptr;
    a.range_start = begin + *delivered;
    a.limit = length;
    curl_slist* headers = nullptr;
    const bool ranged = a.range_start > 0 || length > 0;
    if (ranged) {
      std::string range = "Range: bytes=" + std::to_string(a.range_start) + "-";
      if (length > 0) range += std::to_string(begin + length - 1);
      headers = curl_slist_append(headers, range.c_str());
    }
    const bool own_origin = Origin(url) == endpoint_origin_ && !endpoint_origin_.empty();
    if (own_origin && !options_.token.empty()) {
      headers = curl_slist_append(headers, ("Authorization: Bearer " + options_.token).c_str());
    }
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");  // never file:// etc. via Location
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "deltafin/0.1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_seconds);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options_.low_speed_seconds);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
    const CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(headers);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    const std::string where =
        "GET " + url +
        (ranged ? " (bytes " + std::to_string(a.range_start) + "-" +
                      (length > 0 ? std::to_string(begin + length - 1) : "") + ")"
                : "");
    if (!a.sink_status.ok()) return a.sink_status;
    if (a.etag_mismatch) {
      if (response != nullptr) response->etag_changed = true;
      return Status::Error(where + ": the remote file changed during the download (ETag " + a.etag +
                           ", expected " + expect + "); start it again");
    }
    if (rc != CURLE_OK) {
      const std::string origin = Origin(url);
      if (NeverConnected(rc, c) && !HasAnswered(origin)) {
        // First contact failed: a wrong endpoint or no network, which retrying does not fix.
        return Status::Error(where + ": cannot reach " + origin + " (" + curl_easy_strerror(rc) +
                             "); check HF_ENDPOINT, the network and any proxy settings");
      }
      *retryable = true;
      return Status::Error(where + ": " + curl_easy_strerror(rc));
    }
    MarkAnswered(Origin(url));
    if (code >= 300 && code < 400) {
      char* location = nullptr;
      curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &location);
      if (location == nullptr)
        return Status::Error(where + ": HTTP " + std::to_string(code) +
                             " without a Location header");
      url = ResolveLocation(url, location);
      continue;
    }
    if (response != nullptr) {
      response->status = code;
      response->etag = a.etag;
      response->final_url = url;
      response->content_length = a.content_length;
      response->total_size = a.content_length;
      const size_t slash = a.content_range.rfind('/');
      if (code == 206 && slash != std::string::npos && a.content_range.substr(slash + 1) != "*") {
        response->total_size = std::strtoull(a.content_range.c_str() + slash + 1, nullptr, 10);
      }
    }
    if (code >= 200 && code < 300) return Status::Ok();
    std::string msg = where + ": HTTP " + StatusText(code);
    if (code == 401 || code == 403) {
      msg += " — " + AuthHelp();
      if (options_.token.empty())
        msg += " (no token was found)";
      else
        msg += " (the token that was sent was refused)";
    } else if (code == 404) {
      msg += " — the repository, revision or file does not exist at this endpoint";
    } else if (code == 429 || code >= 500) {
      *retryable = true;
      if (response != nullptr) response->retry_after_seconds = ParseRetryAfter(a.retry_after);
    }
    return Status::Error(msg);
  }
  return Status::Error("GET " + url0 + ": more than 10 redirects");
}

Status HttpClient::GetText(const std::string& url, std::string* body, HttpResponse* response) {
  HttpResponse local;
  HttpResponse* r = response != nullptr ? response : &local;
  r->etag.clear();
  const auto start = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    body->clear();
    uint64_t delivered = 0;
    bool retryable = false;
    r->retry_after_seconds = -1;
    auto h = Acquire();
    Status s = Perform(h.get(), url, 0, 0, nullptr, body, &delivered, r, nullptr, &retryable);
    Release(std::move(h));
    if (s.ok() || !retryable) return s;
    if (attempt >= options_.max_attempts) {
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      return s.WithContext("giving up after " + std::to_string(attempt) + " attempts over " +
                           Seconds(spent.count()));
    }
    auto delay = RetryDelay(s, attempt, *r);
    if (!delay.ok()) return delay.status();
    LogInfo("warning: " + s.message() + "; retrying in " + Seconds(*delay) + " (attempt " +
            std::to_string(attempt + 1) + " of " + std::to_string(options_.max_attempts) + ")");
    std::this_thread::sleep_for(std::chrono::duration<double>(*delay));
  }
}

Status HttpClient::GetRange(const std::string& url, uint64_t begin, uint64_t length,
                            const BodySink& sink, const std::string& expect_etag,
                            HttpResponse* response, const ProgressFn& progress) {
  HttpResponse local;
  HttpResponse* r = response != nullptr ? response : &local;
  r->etag = expect_etag;
  uint64_t delivered = 0;
  int failures = 0, total_failures = 0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const uint64_t before = delivered;
    bool retryable = false;
    r->retry_after_seconds = -1;
    auto h = Acquire();
    Status s = Perform(h.get(), url, begin, length, &sink, nullptr, &delivered, r,
                       progress ? &progress : nullptr, &retryable);
    Release(std::move(h));
    if (s.ok()) {
      const uint64_t want = length > 0              ? length
                            : r->total_size > begin ? r->total_size - begin
                                                    : delivered;
      if (delivered == want) return Status::Ok();
      s = Status::Error("GET " + url + ": the body ended after " + std::to_string(delivered) +
                        " of " + std::to_string(want) + " bytes");
      retryable = true;
    }
    if (!retryable) return s;
    if (delivered > before) failures = 0;  // progress: the backoff starts over
    ++failures;
    ++total_failures;
    if (failures >= options_.max_attempts || total_failures >= 8 * options_.max_attempts) {
      const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start;
      return s.WithContext("giving up after " + std::to_string(total_failures) +
                           " failed attempts over " + Seconds(spent.count()));
    }
    auto delay = RetryDelay(s, failures, *r);
    if (!delay.ok()) return delay.status();
    LogInfo("warning: " + s.message() + "; retrying in " + Seconds(*delay));
    std::this_thread::sleep_for(std::chrono::duration<double>(*delay));
  }
}

}  // namespace deltafin::net
