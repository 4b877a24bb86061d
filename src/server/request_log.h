// One log line per HTTP request, written when its last byte has gone out (cpp-httplib's logger
// hook): client address, method, path, status, duration, and for generation requests the id,
// token counts and timings. Example (with `serve`'s timestamped format):
//   2026-12-01T22:40:01.123Z INFO 127.0.0.1:50412 POST /v1/chat/completions 200 0.412s
//     chatcmpl-1f2e... prompt=14 cached=0 completion=6 ttft=0.093s prefill=14/0.081s
//     decode=5/0.310s io_wait=0.000s
//
// cpp-httplib 0.11 handles one connection's requests on one pool thread, from the pre-routing
// hook through the handler (and a streamed body's content provider) to the logger, so the
// per-request record is thread-local: BeginRequestLog starts it, AnnotateRequestLog adds what a
// handler knows, and LogRequest writes and clears it. A request rejected before routing (a bad
// request line) has no record and is logged without a duration.
#pragma once

#include <httplib.h>

#include <string>

namespace deltafin::server {

void BeginRequestLog(const httplib::Request& req);
// `status` replaces the response's (499: the client left mid-stream after a 200 header went out);
// 0 keeps it. `detail` is appended to the line.
void AnnotateRequestLog(int status, const std::string& detail);
void LogRequest(const httplib::Request& req, const httplib::Response& res);

}  // namespace deltafin::server
