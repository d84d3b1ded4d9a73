// `lowbit serve`: an OpenAI-compatible HTTP server (vLLM's routes and shapes) in front of the
// continuous-batching engine.
//
// Routes: POST /v1/completions, POST /v1/chat/completions (both streamable as server-sent
// events), GET /v1/models, GET /health, GET /metrics (Prometheus text), plus GET /version.
// Every request is handled on its own thread of a pool sized for the engine's concurrency; the
// handler turns the request into engine requests (n of them for `n`), then either waits for them
// or streams their events as they arrive. A client that goes away mid-stream cancels its requests,
// whose KV blocks are freed at the next engine step. Errors are OpenAI's error JSON with a 4xx
// status (503 with Retry-After when the queue is full); nothing a client sends stops the server.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serve/engine.h"

namespace lowbit {
class Tokenizer;
class ChatTemplate;
namespace models {
class Model;
}
}  // namespace lowbit

namespace lowbit::serve {

class ServerMetrics;

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 8000;                 // 0: any free port (see Server::port)
  std::string api_key;             // empty: no authentication
  std::vector<std::string> served_model_names;  // first is the one /v1/models lists first
  std::string model_dir;           // for the chat template and generation defaults
  int64_t max_body_bytes = 32 << 20;  // larger request bodies get 413
  double read_timeout_seconds = 30;   // a client that stalls this long while sending is dropped
  double write_timeout_seconds = 60;  // a client that stops reading this long is dropped
  EngineOptions engine;
};

class Server {
 public:
  // Builds the engine (allocating the KV cache) and the routes; does not listen yet.
  Server(const models::Model& model, const Tokenizer* tokenizer, ServerOptions options);
  ~Server();

  // Binds and serves until stop() (from another thread or a signal handler's thread). Throws
  // IoError naming host:port when it cannot bind.
  void run();
  // Binds now (port() is then known); run() then serves.
  void bind();
  void stop();
  int port() const { return bound_port_; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int bound_port_ = 0;
};

}  // namespace lowbit::serve
