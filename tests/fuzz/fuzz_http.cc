// Fuzz target: HTTP/1.1 request framing and limits, over a real socket into tokenflow's HTTP
// server (Boost.Beast's parser and the connection code around it: header and body limits,
// Transfer-Encoding and Content-Length rules, chunked bodies, Expect: 100-continue, pipelined
// and keep-alive requests, streamed answers). Each input is sent on a fresh connection, which is
// then half-closed; the server must answer every request it accepts with well-formed HTTP (or
// close the connection) within the time limit, never hand the handler a body over its limit,
// and keep serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "serving/http/http_server.h"

namespace {

constexpr size_t kMaxHeader = 2048;
constexpr size_t kMaxBody = 8192;

tf::HttpServer& server() {
  static tf::HttpServer* s = [] {
    tf::HttpServerConfig c;
    c.port = 0;
    c.threads = 1;
    c.max_header_bytes = kMaxHeader;
    c.max_body_bytes = kMaxBody;
    c.read_timeout = std::chrono::milliseconds(5000);
    c.idle_timeout = std::chrono::milliseconds(5000);
    c.write_timeout = std::chrono::milliseconds(5000);
    auto* server =
        new tf::HttpServer(c, [](tf::HttpRequest req, std::shared_ptr<tf::HttpResponder> r) {
          if (req.body.size() > kMaxBody) __builtin_trap();  // the limit let a body through
          nlohmann::json echo = {{"method", req.method},
                                 {"path", nlohmann::json::binary_t(std::vector<uint8_t>(
                                              req.path.begin(), req.path.end()))},
                                 {"body", req.body.size()},
                                 {"headers", req.headers.size()}};
          if (req.path.rfind("/stream", 0) == 0) {  // a chunked answer, as SSE is sent
            r->start_stream(200, "text/event-stream");
            for (int i = 0; i < 3; ++i) r->write("data: " + std::to_string(i) + "\n\n");
            r->end();
          } else {
            r->send(200, echo.dump(-1, '?', false, nlohmann::json::error_handler_t::replace));
          }
        });
    server->start();
    return server;  // lives for the process: the I/O thread serves every input
  }();
  return *s;
}

// A status line the server wrote: "HTTP/1.1 " and three digits.
bool status_line_at(const std::string& out, size_t at, int* status) {
  if (out.compare(at, 9, "HTTP/1.1 ") != 0 || out.size() < at + 12) return false;
  *status = 0;
  for (size_t i = at + 9; i < at + 12; ++i) {
    if (out[i] < '0' || out[i] > '9') return false;
    *status = *status * 10 + (out[i] - '0');
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint16_t port = server().port();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  // A refused connection means the server stopped listening: a failure. Running out of local
  // ports (EADDRNOTAVAIL, at thousands of connections a second) is the harness's: wait a little.
  for (int attempt = 0;; ++attempt) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    const int err = errno;
    close(fd);
    if ((err != EADDRNOTAVAIL && err != EAGAIN && err != EINTR) || attempt == 1000) {
      std::fprintf(stderr, "cannot connect to the server: %s\n", std::strerror(err));
      __builtin_trap();
    }
    usleep(10000);
  }
  // Closed with a reset once read (below): no TIME_WAIT left on either side, so the local ports
  // are not used up.
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  // Send what the server takes (it may close early, after an error answer: EPIPE is fine).
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  // Read until the server closes. It must, within its own limits: the request is complete or
  // cut short by the half-close, and nothing is left to wait for.
  std::string out;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) {
      std::fprintf(stderr, "the server neither answered nor closed the connection\n");
      __builtin_trap();
    }
    if (poll(&p, 1, left) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // Every answer is well-formed HTTP; the handler above never fails, so no 500.
  if (!out.empty()) {
    int status = 0;
    if (!status_line_at(out, 0, &status)) {
      std::fprintf(stderr, "not an HTTP answer: %.80s\n", out.c_str());
      __builtin_trap();
    }
    for (size_t at = out.find("\r\nHTTP/1.1 "); at != std::string::npos;
         at = out.find("\r\nHTTP/1.1 ", at + 2)) {
      if (status_line_at(out, at + 2, &status) && status == 500) __builtin_trap();
    }
    if (status == 500) __builtin_trap();
  }
  return 0;
}
