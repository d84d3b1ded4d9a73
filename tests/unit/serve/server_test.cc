// The HTTP server's socket: a burst of connections must not overflow its accept queue.
// (Routes, limits and errors are tested end to end with real clients in tests/serve/.)
#include "serve/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {
namespace {

const std::string kModelDir = std::string(LOWBIT_SOURCE_DIR) + "/models/ref-llama-19m";

// A non-blocking connect to 127.0.0.1:port; true once the handshake completed within timeout_ms.
bool connects(int fd, int port, int timeout_ms) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) return true;
  if (errno != EINPROGRESS) return false;
  pollfd waiting{fd, POLLOUT, 0};
  if (poll(&waiting, 1, timeout_ms) != 1) return false;
  int error = 0;
  socklen_t size = sizeof(error);
  return getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
}

// Bound but not yet serving, nobody accepts: every connection waits in the kernel's accept queue,
// as they do when the accept thread falls behind a burst on a busy machine. cpp-httplib listens
// with a backlog of 5, so the 7th handshake never completes (its SYN is dropped and retried with
// nobody to make room); 64 must all complete, as 64 clients connecting at once do (the serve
// suite starts 32 streams together). The 5 s bound only keeps a failure from waiting out TCP's
// SYN retries (about two minutes); a handshake on loopback takes microseconds.
TEST(ServerTest, ABurstOfConnectionsFitsTheAcceptQueue) {
  const std::unique_ptr<models::Model> model = models::Model::load(kModelDir);
  const Tokenizer tokenizer = Tokenizer::from_dir(kModelDir);
  ServerOptions options;
  options.port = 0;
  options.model_dir = kModelDir;
  options.engine.kv_cache_bytes = 8 << 20;  // the test sends no request
  Server server(*model, &tokenizer, options);
  server.bind();
  ASSERT_GT(server.port(), 0);

  constexpr int kConnections = 64;
  std::vector<int> sockets;
  int completed = 0;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockets.push_back(fd);
    if (!connects(fd, server.port(), 5000)) break;
    ++completed;
  }
  for (const int fd : sockets) close(fd);
  EXPECT_EQ(completed, kConnections) << "the accept queue of the listening socket is too short";
}

}  // namespace
}  // namespace lowbit::serve
