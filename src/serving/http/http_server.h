#pragma once
// An asynchronous HTTP/1.1 server on Boost.Beast / Asio: a few I/O threads serve every
// connection (no thread per connection), with keep-alive, limits on header and body size, read
// and write timeouts, and responses that are either whole or streamed as chunks (Server-Sent
// Events, one flush per event). A handler runs on an I/O thread and must not block: it answers
// at once or keeps the HttpResponder and answers later from any thread. A client that goes away
// before its response ends is reported through HttpResponder::on_disconnect, so the work done
// for it can be cancelled.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "serving/core/job_host.h"

namespace tf {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (see HttpServer::port())
  int threads = 1;       // I/O threads
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds read_timeout{30000};   // to receive a whole request
  std::chrono::milliseconds idle_timeout{60000};   // a keep-alive connection with no request
  std::chrono::milliseconds write_timeout{60000};  // a client that stops reading
  int64_t max_connections = 0;  // open connections at most; more get a 503 and close (0: none)
  // A client's FIN (EOF) while its response is being made: false (default) cancels the request
  // as a reset does (a client that gave up); true takes it as a half-close
  // (shutdown(SHUT_WR) after the request) and still sends the answer.
  bool half_close = false;
  // A streamed response's bytes queued and not yet written to the socket: past it the client
  // reads too slowly, and the connection is closed (the request cancelled). 0: no limit.
  size_t max_unsent_bytes = 8u << 20;
  // TLS (HTTPS) when both are set: PEM certificate chain and private key. TLS 1.2 and 1.3 only.
  std::string tls_cert, tls_key;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string path;     // the target without its query
  std::string query;    // after '?', undecoded
  HttpHeaders headers;  // names lower-cased
  std::string body;
  std::string remote;  // the peer's address
  std::chrono::steady_clock::time_point received;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
  // A lookup of this request's headers ("" when absent) for as long as the request lives: what
  // a traffic split's sticky header is read through (ModelRegistry::HeaderFn).
  std::function<std::string(const std::string&)> header_lookup() const {
    return [this](const std::string& name) {
      const std::string* v = header(name);
      return v ? *v : std::string();
    };
  }
};

class HttpConnection;

// The answer to one request. Thread-safe: every call is carried out on the connection's I/O
// strand, in call order. Exactly one of send() or start_stream() ... end() is used.
class HttpResponder : public JobHost, public std::enable_shared_from_this<HttpResponder> {
 public:
  explicit HttpResponder(std::shared_ptr<HttpConnection> connection);
  ~HttpResponder() override;

  // A whole response (Content-Length).
  void send(int status, std::string body, std::string content_type = "application/json",
            HttpHeaders headers = {});
  // A streamed response (chunked): the status line and headers now, then write() per chunk.
  void start_stream(int status, std::string content_type, HttpHeaders headers = {});
  void write(std::string data);
  void end();

  // Runs fn on the connection's strand (so it is serialized with this responder's writes).
  void post(std::function<void()> fn) override;
  // Called once, on the strand, if the client disconnects (or a write fails or times out)
  // before the response ended. Set it before the work it cancels can finish.
  void on_disconnect(std::function<void()> fn) override;
  bool disconnected() const override { return disconnected_; }
  // Extra headers every response of this request carries (the request id).
  void add_header(std::string name, std::string value);

 private:
  friend class HttpConnection;
  std::shared_ptr<HttpConnection> connection_;
  std::function<void()> on_disconnect_;
  HttpHeaders extra_headers_;
  std::atomic<bool> disconnected_{false};
  bool started_ = false;
  bool finished_ = false;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpResponder>)>;
// The body and content type of an error the server answers by itself (400 for a malformed
// request, 413 for a body over the limit, 431 for headers over it, 503 while draining).
using HttpErrorFormatter = std::function<std::pair<std::string, std::string>(int, std::string)>;

class HttpServer {
 public:
  // Binds and listens at once (throws Error if the address is taken or invalid); serving starts
  // with start().
  HttpServer(HttpServerConfig config, HttpHandler handler, HttpErrorFormatter errors = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();
  uint16_t port() const { return port_; }
  // Graceful shutdown, step 1: close the listening socket; requests on open connections get
  // 503 from now on, responses in progress go on.
  void stop_accepting();
  // Step 2: waits until no response is in progress or the deadline passes; true if none is.
  bool drain(std::chrono::steady_clock::time_point deadline);
  // Step 3: closes every connection and joins the I/O threads.
  void stop();

  int64_t open_connections() const;
  int64_t responses_in_progress() const;
  // Streams ended because their client read too slowly (max_unsent_bytes).
  int64_t slow_reader_streams() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
};

// Reason phrase of a status code ("Not Found").
std::string_view http_reason(int status);

}  // namespace tf
