// HttpClient: the HTTP/1.1 client every download goes through (libcurl easy handles).
//
// - A bounded pool of easy handles: each keeps its own keep-alive connection(s), so at most
//   `max_connections` transfers run at once and consecutive requests reuse connections.
// - Redirects are followed here, not by libcurl, so the token rule is explicit and testable: the
//   `Authorization: Bearer` header goes only to the endpoint's own origin (scheme, host, port);
//   a redirect to any other origin (a CDN) is requested without it.
// - Ranged GETs stream the body to a sink (a file at an offset, a buffer); a transfer that breaks
//   off is retried with backoff from the first byte not yet delivered (Range: bytes=N-M), and the
//   ETag of the first response must not change between attempts (the file changed under us).
// - 429 and 5xx are retried after the exponential backoff or the response's Retry-After, whichever
//   is longer (a Retry-After beyond kMaxRetryAfterSeconds is an error at once: rerun later).
// - An origin that has never answered and cannot be connected to (name not resolved, connection
//   refused, connect timeout) fails at once: a wrong HF_ENDPOINT or no network is one clear error,
//   not a minute of retries. Once an origin has answered, losing it is retried like any break.
// - Errors name the URL, the HTTP status or the libcurl error, and for 401/403 say how to
//   provide a token.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin::net {

struct HttpOptions {
  std::string endpoint;  // base URL whose origin may receive the token, e.g. https://huggingface.co
  std::string token;     // empty: send no Authorization header
  int max_connections = 8;
  int max_attempts = 6;          // per request, counting the first
  double backoff_seconds = 0.5;  // first retry delay; doubles per retry (capped at 16 s)
  long connect_timeout_seconds = 10;
  long low_speed_seconds = 60;  // abort a transfer slower than 1 KB/s for this long
};

struct HttpResponse {
  long status = 0;
  std::string etag;                 // of the final (post-redirect) response, quotes kept
  std::string final_url;            // after redirects
  uint64_t content_length = 0;      // of this response's body; 0 when absent
  uint64_t total_size = 0;          // from Content-Range ".../TOTAL" of a 206; else content_length
  bool etag_changed = false;        // GetRange failed because the ETag differed from the expected
  double retry_after_seconds = -1;  // Retry-After of the last 429/5xx (delta-seconds); -1: none
};

// The longest Retry-After a request waits for; a server asking for more gets an error saying so.
inline constexpr double kMaxRetryAfterSeconds = 300;

// Receives the body of a ranged GET in order: (bytes, count) at body position `offset` relative
// to the requested range start. Returning an error aborts the transfer without retry.
using BodySink = std::function<Status(const uint8_t* data, size_t size, uint64_t offset)>;
// Called with the running byte count of the current request (for progress bars).
using ProgressFn = std::function<void(uint64_t delta_bytes)>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const HttpOptions& options() const { return options_; }

  // GET of a small resource (API JSON) into *body. Non-2xx is an error naming the status.
  Status GetText(const std::string& url, std::string* body, HttpResponse* response = nullptr);

  // GET bytes [begin, begin + length) of `url` into `sink`; length 0 means "to the end".
  // `expect_etag`, when non-empty, must equal the response's ETag (else an error saying the
  // remote file changed). Retries resume after the last delivered byte. response->etag holds
  // the ETag seen from the first body byte on (a sink may read it to persist it).
  Status GetRange(const std::string& url, uint64_t begin, uint64_t length, const BodySink& sink,
                  const std::string& expect_etag = "", HttpResponse* response = nullptr,
                  const ProgressFn& progress = nullptr);

  // The origin ("scheme://host:port", lower-case, default port filled in) of an absolute URL;
  // empty if it is not an http(s) URL.
  static std::string Origin(const std::string& url);
  // Resolves a Location header value against the URL it came from.
  static std::string ResolveLocation(const std::string& base, const std::string& location);

 private:
  struct Handle;
  std::unique_ptr<Handle> Acquire();
  void Release(std::unique_ptr<Handle> handle);
  // One request with manual redirect following; bytes go to `sink` from body position `done`.
  Status Perform(Handle* h, const std::string& url, uint64_t begin, uint64_t length,
                 const BodySink* sink, std::string* text, uint64_t* delivered,
                 HttpResponse* response, const ProgressFn* progress, bool* retryable);
  // How long to wait before retry number `failures` (1-based) after error `s`; an error instead
  // when the server's Retry-After is longer than kMaxRetryAfterSeconds.
  Result<double> RetryDelay(const Status& s, int failures, const HttpResponse& r) const;
  bool HasAnswered(const std::string& origin);
  void MarkAnswered(const std::string& origin);

  HttpOptions options_;
  std::string endpoint_origin_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Handle>> idle_;
  std::vector<std::string> answered_origins_;  // origins that sent an HTTP response
  int outstanding_ = 0;
  std::condition_variable cv_;
};

// A Retry-After value in seconds from now: delta-seconds or an HTTP-date (RFC 9110 §10.2.3);
// -1 when empty or unreadable.
double ParseRetryAfter(const std::string& value);

// "HTTP 401 from URL" explanations shared by the client and the installer.
std::string AuthHelp();

}  // namespace deltafin::net
