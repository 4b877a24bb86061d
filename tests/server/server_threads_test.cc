// The server's threads together, in one process (labels e2e and tsan): an HttpServer on the
// golden tiny model answers concurrent clients of all three APIs — whole and streamed, a client
// that leaves mid-stream, a Responses continuation, /metrics and /health polled throughout — so
// the gate's epoll thread, the HTTP pool, the engine worker (scheduler.h), the prefix cache's disk
// writer and the metrics, request-log and response-store locks all run at once. Under the tsan
// preset (docs/TESTING.md) ThreadSanitizer checks every access they share; in the release build it
// checks that each answer is complete and well formed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "deltafin/engine.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_files.h"

namespace deltafin::server {
namespace {

using json = nlohmann::json;

const char kModel[] = DF_TEST_DATA_DIR "/golden/tiny-k3";

// A system prompt longer than the prefix cache's shortest snapshot (128 tokens), so the first chat
// request snapshots its preamble (written to disk on the cache's thread) and later ones restore it.
std::string LongSystemPrompt() {
  std::string s;
  for (int i = 0; i < 5; ++i)
    s += "Answer briefly and politely, sentence " + std::to_string(i) + ". ";
  return s;
}

class ServerThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLevel(getenv("DF_TEST_LOG") ? LogLevel::kInfo : LogLevel::kWarn);
    auto tok = tokenizer::Tokenizer::LoadModelDir(kModel);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_ = std::move(*tok);
    EngineOptions eo;
    eo.model_dir = kModel;
    eo.threads = 2;
    auto engine = Engine::Load(eo);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = std::move(*engine);
    ServerOptions opt;
    opt.port = 0;
    opt.max_queue = 16;
    opt.http_threads = 8;
    opt.ping_interval_s = 0.05;  // keep-alive pings race with the tokens
    opt.cache_dir = dir_.Join("prefix-cache");
    opt.prefill_piece = 16;
    server_ = std::make_unique<HttpServer>(*engine_, *tok_, opt);
    runner_ = std::thread([this] { run_status_ = server_->Run(); });
    for (int i = 0; i < 3000 && server_->port() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_NE(server_->port(), 0) << "the server did not start";
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    if (runner_.joinable()) runner_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.message();
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    c->set_read_timeout(std::chrono::seconds(300));
    return c;
  }

  // POSTs `body` and returns the status and the whole response body.
  std::pair<int, std::string> Post(const std::string& path, const json& body) const {
    auto res = Client()->Post(path, body.dump(), "application/json");
    if (!res) return {-1, httplib::to_string(res.error())};
    return {res->status, res->body};
  }

  // POSTs a streaming request and reads the body to its end, or until `leave_at` arrives ("": to
  // the end); returns what arrived. Leaving closes the connection, as a client that leaves does.
  std::string Stream(const std::string& path, const json& body,
                     const std::string& leave_at = "") const {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    std::string got;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      got.append(data, n);
      return leave_at.empty() || got.find(leave_at) == std::string::npos;
    };
    (void)Client()->send(req);
    return got;
  }

  testing::ScopedTempDir dir_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread runner_;
  Status run_status_ = Status::Ok();
};

json Chat(bool stream, int max_tokens) {
  return {{"messages",
           {{{"role", "system"}, {"content", LongSystemPrompt()}},
            {{"role", "user"}, {"content", "Hello there"}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream},
          {"stream_options", {{"include_usage", stream}}},
          {"timings_per_token", true}};
}

TEST_F(ServerThreadsTest, ThreeApisAtOnceWithACancelAndMetricsPolling) {
  std::atomic<bool> done{false};
  std::atomic<int> metrics_polls{0};
  std::vector<std::string> failures(8);
  std::vector<std::thread> clients;

  // /metrics and /health while everything else runs.
  std::thread poller([&] {
    while (!done.load()) {
      auto c = Client();
      auto m = c->Get("/metrics");
      auto h = c->Get("/health");
      if (m && m->status == 200 && h && h->status == 200) ++metrics_polls;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  clients.emplace_back([&] {
    const std::string s = Stream("/v1/chat/completions", Chat(true, 6));
    if (s.find("data: [DONE]") == std::string::npos) failures[0] = "chat stream: " + s;
  });
  clients.emplace_back([&] {
    auto [status, body] = Post("/v1/chat/completions", Chat(false, 6));
    if (status != 200 || json::parse(body)["object"] != "chat.completion") {
      failures[1] = "chat: " + std::to_string(status) + " " + body;
    }
  });
  clients.emplace_back([&] {
    const std::string s = Stream("/v1/completions", {{"prompt", "Once upon a time"},
                                                     {"max_tokens", 5},
                                                     {"echo", true},
                                                     {"logprobs", 2},
                                                     {"stream", true}});
    if (s.find("data: [DONE]") == std::string::npos) failures[2] = "completions stream: " + s;
  });
  clients.emplace_back([&] {
    const std::string s =
        Stream("/v1/messages", {{"max_tokens", 6},
                                {"stream", true},
                                {"system", LongSystemPrompt()},
                                {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    if (s.find("event: message_stop") == std::string::npos) failures[3] = "messages: " + s;
  });
  clients.emplace_back([&] {
    auto [status, body] =
        Post("/v1/responses", {{"input", "Tell me a story"}, {"max_output_tokens", 4}});
    if (status != 200) {
      failures[4] = "responses: " + std::to_string(status) + " " + body;
      return;
    }
    const std::string id = json::parse(body)["id"];
    const std::string s = Stream("/v1/responses", {{"input", "And then?"},
                                                   {"previous_response_id", id},
                                                   {"max_output_tokens", 4},
                                                   {"stream", true}});
    if (s.find("event: response.completed") == std::string::npos &&
        s.find("event: response.incomplete") == std::string::npos) {
      failures[4] = "responses continuation: " + s;
    }
  });
  // A client that leaves at the first chunk of a long answer: its running job is cancelled.
  clients.emplace_back([&] {
    const std::string s = Stream("/v1/chat/completions", Chat(true, 400), "data: {");
    if (s.find("data: {") == std::string::npos) failures[5] = "the left stream: " + s;
  });
  clients.emplace_back([&] {
    auto [status, body] = Post("/v1/messages/count_tokens",
                               {{"messages", {{{"role", "user"}, {"content", "count me"}}}}});
    if (status != 200) failures[6] = "count_tokens: " + std::to_string(status) + " " + body;
  });
  clients.emplace_back([&] {
    // A malformed body is answered on the HTTP thread while generations run.
    auto [status, body] = Post("/v1/chat/completions", json{{"messages", "nope"}});
    if (status != 400) failures[7] = "bad body: " + std::to_string(status) + " " + body;
  });
  for (auto& t : clients) t.join();
  // The server still answers after the cancel, and its counters saw every endpoint.
  auto [status, body] = Post("/v1/chat/completions", Chat(false, 3));
  EXPECT_EQ(status, 200) << body;
  done.store(true);
  poller.join();
  for (const auto& f : failures) EXPECT_EQ(f, "");
  EXPECT_GT(metrics_polls.load(), 0);
  auto m = Client()->Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* ep : {"chat", "completions", "messages", "responses"}) {
    EXPECT_NE(m->body.find("endpoint=\"" + std::string(ep) + "\",code=\"200\""), std::string::npos)
        << ep << "\n"
        << m->body;
  }
}

}  // namespace
}  // namespace deltafin::server
