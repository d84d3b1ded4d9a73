// The HTTP side of `lowbit serve`: routes, authentication, limits, error translation.
// Generation routes are in completion_handler.cc.
#include "serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "lowbit/error.h"
#include "models/model.h"
#include "serve/completion_handler.h"
#include "serve/metrics.h"
#include "serve/protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

struct Server::Impl {
  Impl(const models::Model& model, const Tokenizer* tokenizer, ServerOptions opts)
      : options(std::move(opts)),
        engine(model, tokenizer, options.engine),
        handler(model, tokenizer, engine, metrics, options) {}

  ServerOptions options;
  ServerMetrics metrics;
  Engine engine;
  CompletionHandler handler;
  httplib::Server http;
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
  // The listening socket, recorded by the socket-options hook while bind() runs (httplib does not
  // expose it), so that its accept queue can be widened.
  bool recording_listen_socket = false;
  int listen_socket = -1;
};

namespace {

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(error_body(error), "application/json");
}

// Enough threads for every sequence the engine batches to stream at once, plus room for
// health checks, metrics scrapes and clients waiting in the queue.
size_t thread_pool_size(const ServerOptions& options) {
  return static_cast<size_t>(std::clamp<int64_t>(2 * options.engine.max_num_seqs + 16, 16, 1024));
}

// Debian's cpp-httplib (a compiled library, so its CPPHTTPLIB_LISTEN_BACKLOG cannot be changed
// here) listens with a backlog of 5. When 32 clients connect at once while both cores decode, the
// accept thread falls behind, the kernel's accept queue overflows, it falls back to SYN cookies,
// and some connections are reset before their request is read (the client sees a read error).
// uvicorn, hence vLLM, asks for 2048; the kernel caps it at net.core.somaxconn.
constexpr int kListenBacklog = 2048;

// Linux lets listen() on a socket that already listens change its backlog.
void widen_accept_queue(int listen_socket) {
  int listening = 0;
  socklen_t size = sizeof(listening);
  if (listen_socket < 0 ||
      getsockopt(listen_socket, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) {
    log_warn("serve: could not find the listening socket; bursts of connections may be reset");
    return;
  }
  if (listen(listen_socket, kListenBacklog) != 0) {
    log_warn(std::string("serve: cannot widen the accept queue: ") + std::strerror(errno));
  }
}

bool authorized(const httplib::Request& req, const std::string& api_key) {
  if (api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  return header == "Bearer " + api_key;
}

}  // namespace

Server::Server(const models::Model& model, const Tokenizer* tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, std::move(options))) {
  Impl& s = *impl_;
  httplib::Server& http = s.http;
  const size_t threads = thread_pool_size(s.options);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(static_cast<size_t>(s.options.max_body_bytes));
  http.set_read_timeout(std::chrono::duration<double>(s.options.read_timeout_seconds));
  http.set_write_timeout(std::chrono::duration<double>(s.options.write_timeout_seconds));
  http.set_keep_alive_max_count(1000);
  // Clients keep an idle connection for reuse about 5 s (httpx, hence the openai SDK); a server
  // that closes idle connections after the same 5 s (cpp-httplib's default) races with a client
  // that reuses one just then, and that request fails with a connection reset. Closing later than
  // the clients do leaves the choice to them. An idle connection holds a pool thread meanwhile.
  http.set_keep_alive_timeout(15);
  // One small write per token: without TCP_NODELAY, Nagle's algorithm holds each chunk until the
  // client's delayed ACK (up to ~200 ms per token on Linux).
  http.set_tcp_nodelay(true);
  http.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);  // SO_REUSEADDR, as without a hook
    if (s.recording_listen_socket) s.listen_socket = sock;
  });

  // API keys guard the OpenAI routes, as in vLLM (health and metrics stay open for probes).
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 || authorized(req, s.options.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, ApiError(401, "Unauthorized: a valid API key is required "
                                  "(header 'Authorization: Bearer KEY')",
                             "", "authentication_error"));
    s.metrics.record_request(req.path, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib detects itself (unknown route, body over the limit, bad request line) get
  // OpenAI's error JSON too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote its error
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "Not found: " + req.method + " " + req.path;
    if (res.status == 413) message = "Request body too large";
    if (res.status == 405) message = "Method not allowed: " + req.method + " " + req.path;
    send_error(res, ApiError(res.status, message));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                std::exception_ptr error) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log_message(LogLevel::ERROR, "request failed: " + what);
    send_error(res, ApiError(500, what, "", "InternalServerError"));
  });

  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content("", "text/plain");
    s.metrics.record_request("/health", 200);
  });
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version":"lowbit"})", "application/json");
  });
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             s.started.time_since_epoch()).count();
    res.set_content(models_list_body(s.options.served_model_names, s.engine.max_model_len(),
                                     created),
                    "application/json");
    s.metrics.record_request("/v1/models", 200);
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    const EngineStats stats = s.engine.stats();
    s.metrics.set_scheduler_state(stats.running, stats.waiting, stats.kv_usage());
    s.metrics.set_prefix_cache(stats.prefix_caching, stats.prefix_cache_queries,
                               stats.prefix_cache_hits);
    res.set_content(s.metrics.prometheus_text(s.options.served_model_names.front()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    s.handler.handle(req, res, Endpoint::COMPLETIONS);
  });
  http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    s.handler.handle(req, res, Endpoint::CHAT);
  });
}

Server::~Server() { stop(); }

void Server::bind() {
  Impl& s = *impl_;
  if (bound_port_ != 0) return;
  s.recording_listen_socket = true;
  if (s.options.port == 0) {
    bound_port_ = s.http.bind_to_any_port(s.options.host);
  } else if (s.http.bind_to_port(s.options.host, s.options.port)) {
    bound_port_ = s.options.port;
  }
  s.recording_listen_socket = false;
  if (bound_port_ <= 0) {
    bound_port_ = 0;
    throw IoError("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                  " (address in use or not available)");
  }
  widen_accept_queue(s.listen_socket);
}

void Server::run() {
  bind();
  impl_->http.listen_after_bind();
}

void Server::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace lowbit::serve
