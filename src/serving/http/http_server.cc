#include "serving/http/http_server.h"

#include <fmt/format.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <variant>

#include "core/error.h"
#include "core/log.h"

namespace tf {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string_view http_reason(int status) {
  const auto r = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return {r.data(), r.size()};
}

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

struct HttpServer::Impl {
  HttpServerConfig config;
  HttpHandler handler;
  HttpErrorFormatter errors;
  // Before ioc: connections destroyed with the I/O context's pending handlers still count.
  std::atomic<bool> accepting{true};
  std::atomic<bool> stopped{false};  // the I/O threads are gone: post nothing any more
  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> in_progress{0};
  std::atomic<int64_t> slow_readers{0};  // streams ended for --max-unsent-bytes
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::unique_ptr<net::ssl::context> tls;  // set with --tls-cert / --tls-key
  net::steady_timer accept_backoff;
  std::atomic<bool> out_of_fds{false};

  Impl(HttpServerConfig c, HttpHandler h, HttpErrorFormatter e)
      : config(std::move(c)),
        handler(std::move(h)),
        errors(std::move(e)),
        ioc(std::max(1, config.threads)),
        acceptor(ioc),
        accept_backoff(ioc) {}
  void do_accept();
  void refuse(tcp::socket socket);
};

// One client connection: reads a request, hands it to the handler, writes the response (whole
// or chunk by chunk from a queue), then reads the next request if the connection is kept alive.
// Every member is touched only on the connection's strand.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket socket, HttpServer::Impl& server)
      : stream_(make_stream(std::move(socket), server)), server_(server) {
    ++server_.connections;
    beast::error_code ec;
    const auto ep = lowest().socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    lowest().socket().non_blocking(true, ec);  // the disconnect watch peeks without blocking
  }
  ~HttpConnection() { --server_.connections; }

  void start() {
    net::dispatch(executor(), [self = shared_from_this()] {
      auto* tls = std::get_if<TlsStream>(&self->stream_);
      if (!tls) return self->read_request();
      // TLS: the handshake first, within the time allowed to read a request.
      self->lowest().expires_after(self->server_.config.read_timeout);
      tls->async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
        if (ec) return self->fail_connection();
        self->read_request();
      });
    });
  }
  net::any_io_executor executor() { return lowest().get_executor(); }
  bool server_stopped() const { return server_.stopped; }

  // Queues the bytes of a response; `last` ends it.
  void queue(std::string bytes, bool last) {
    if (closed_) return;
    unsent_ += bytes.size();
    if (!bytes.empty()) out_.push_back(std::move(bytes));
    if (last) response_done_ = true;
    if (!last && server_.config.max_unsent_bytes > 0 && unsent_ > server_.config.max_unsent_bytes) {
      // A stream whose client takes its bytes slower than they are made (or not at all, with
      // the per-write timeout reset by every trickle): ended, its request cancelled, instead of
      // holding ever more memory.
      log::warn(
          "{}: {} bytes of a stream are unsent (over --max-unsent-bytes {}): the client "
          "reads too slowly; the stream is ended",
          remote_, unsent_, server_.config.max_unsent_bytes);
      ++server_.slow_readers;
      return fail_connection();
    }
    if (!writing_) write_next();
  }

  std::string head(int status, const std::string& content_type, const HttpHeaders& headers,
                   std::optional<size_t> content_length) {
    std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status, http_reason(status));
    h += "Server: tokenflow\r\n";
    if (!content_type.empty()) h += fmt::format("Content-Type: {}\r\n", content_type);
    for (const auto& [k, v] : headers) h += fmt::format("{}: {}\r\n", k, v);
    if (content_length) {
      h += fmt::format("Content-Length: {}\r\n", *content_length);
    } else {
      h += "Transfer-Encoding: chunked\r\n";
    }
    h += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return h;
  }

  void respond_whole(int status, std::string body, const std::string& content_type,
                     const HttpHeaders& headers) {
    std::string bytes = head(status, content_type, headers, body.size());
    bytes += body;
    queue(std::move(bytes), true);
  }

  // A client gone (or a write failed): tell the responder, close the socket.
  void fail_connection() {
    if (closed_) return;
    closed_ = true;
    out_.clear();
    unsent_ = 0;
    if (responding_) {
      responding_ = false;
      --server_.in_progress;
      if (auto r = responder_.lock()) {
        r->disconnected_ = true;
        if (auto fn = std::move(r->on_disconnect_)) fn();
      }
    }
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().close();
  }

 private:
  friend class HttpResponder;

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_.config.max_header_bytes));
    parser_->body_limit(server_.config.max_body_bytes);
    lowest().expires_after(first_request_ ? server_.config.read_timeout
                                          : server_.config.idle_timeout);
    // The header first: a transfer coding we cannot frame is refused before any body byte is
    // read, and a client that sent "Expect: 100-continue" gets its 100 before sending the body.
    std::visit(
        [&](auto& s) {
          http::async_read_header(
              s, buffer_, *parser_,
              [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
        },
        stream_);
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read(ec);
    const auto& msg = parser_->get();
    if (const auto te = msg.find(http::field::transfer_encoding); te != msg.end()) {
      // Only "chunked" alone: with any other coding (gzip, or chunked not last) the body's
      // length is unknowable, and a proxy that frames it otherwise could smuggle a request.
      std::string v(te->value());
      for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      v.erase(std::remove_if(v.begin(), v.end(), [](char c) { return c == ' ' || c == '\t'; }),
              v.end());
      if (v != "chunked")
        return error_response(501, fmt::format("Transfer-Encoding '{}' is not supported (only "
                                               "chunked)",
                                               std::string(te->value())));
      if (msg.find(http::field::content_length) != msg.end())
        return error_response(400,
                              "a request may not have both Transfer-Encoding and "
                              "Content-Length");
    }
    if (const auto ex = msg.find(http::field::expect); ex != msg.end()) {
      if (!beast::iequals(ex->value(), "100-continue"))
        return error_response(
            417, fmt::format("Expect '{}' is not supported", std::string(ex->value())));
      if (!parser_->is_done()) {
        auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
        std::visit(
            [&](auto& s) {
              net::async_write(s, net::buffer(*cont),
                               [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                                 if (wec) return self->fail_connection();
                                 self->read_body();
                               });
            },
            stream_);
        return;
      }
    }
    read_body();
  }

  void read_body() {
    if (closed_) return;
    std::visit(
        [&](auto& s) {
          http::async_read(
              s, buffer_, *parser_,
              [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
        },
        stream_);
  }

  void error_response(int status, std::string message) {
    keep_alive_ = false;
    auto [body, type] = server_.errors
                            ? server_.errors(status, std::move(message))
                            : std::pair<std::string, std::string>{
                                  nlohmann::json{{"error", message}}.dump(
                                      -1, ' ', false, nlohmann::json::error_handler_t::replace),
                                  "application/json"};
    respond_whole(status, std::move(body), type, {});
  }

  void on_read(beast::error_code ec) {
    if (ec == net::error::operation_aborted || closed_) return;
    if (ec == http::error::body_limit) {
      return error_response(413, fmt::format("the request body is over the limit of {} bytes",
                                             server_.config.max_body_bytes));
    }
    if (ec == http::error::header_limit) {
      return error_response(431, fmt::format("the request headers are over the limit of {} bytes",
                                             server_.config.max_header_bytes));
    }
    if (ec && &ec.category() == &http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return error_response(400, fmt::format("malformed HTTP request: {}", ec.message()));
    }
    if (ec) {  // end of stream, timeout, reset: nothing to answer
      fail_connection();
      return;
    }
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    const std::string_view target(msg.target().data(), msg.target().size());
    const size_t q = target.find('?');
    req.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    req.body = std::move(msg.body());
    req.remote = remote_;
    req.received = std::chrono::steady_clock::now();
    parser_.reset();

    responding_ = true;
    ++server_.in_progress;
    if (!server_.accepting) {
      keep_alive_ = false;
      return error_response(503, "the server is shutting down");
    }
    auto responder = std::make_shared<HttpResponder>(shared_from_this());
    responder_ = responder;
    watch_disconnect();
    try {
      server_.handler(std::move(req), responder);
    } catch (const std::exception& e) {
      log::error("request handler failed: {}", e.what());
      responder->send(500, R"({"error": "internal error"})");
    }
  }

  // While a response is in progress nothing is read, so watch the socket: readable with no data
  // means the client closed (or reset) the connection.
  void watch_disconnect() {
    if (watching_ || !responding_ || closed_) return;
    watching_ = true;
    lowest().socket().async_wait(tcp::socket::wait_read,
                                 [self = shared_from_this()](beast::error_code ec) {
                                   self->watching_ = false;
                                   if (!self->responding_ || self->closed_) return;
                                   if (ec) {
                                     if (ec != net::error::operation_aborted)
                                       self->fail_connection();
                                     return;
                                   }
                                   char c;
                                   beast::error_code peek_ec;
                                   const size_t n = self->lowest().socket().receive(
                                       net::buffer(&c, 1), tcp::socket::message_peek, peek_ec);
                                   if (peek_ec == net::error::would_block) {
                                     self->watch_disconnect();  // the data was read meanwhile
                                   } else if (peek_ec && peek_ec != net::error::eof) {
                                     self->fail_connection();  // reset: the client is gone
                                   } else if (n == 0) {
                                     // FIN: a client that closed its socket (curl given up, a
                                     // killed process) is gone: its request is cancelled now,
                                     // not at the next write, so that an unread answer does
                                     // not keep computing. With half_close the client may
                                     // only have shut its sending side: the answer still goes
                                     // out, and the connection closes after it.
                                     if (self->server_.config.half_close) {
                                       self->keep_alive_ = false;
                                     } else {
                                       self->fail_connection();
                                     }
                                   }
                                   // Otherwise a pipelined request waits; it is read later.
                                 });
  }

  void write_next() {
    writing_ = true;
    lowest().expires_after(server_.config.write_timeout);
    std::visit(
        [&](auto& s) {
          net::async_write(
              s, net::buffer(out_.front()),
              [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
        },
        stream_);
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) {
      fail_connection();
      return;
    }
    unsent_ -= out_.front().size();
    out_.pop_front();
    if (!out_.empty()) return write_next();
    if (!response_done_) return;
    // The response is complete.
    response_done_ = false;
    if (responding_) {
      responding_ = false;
      --server_.in_progress;
    }
    responder_.reset();
    first_request_ = false;
    if (!keep_alive_) {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      closed_ = true;
      lowest().close();
      return;
    }
    read_request();
  }

  using TlsStream = beast::ssl_stream<beast::tcp_stream>;
  using Stream = std::variant<beast::tcp_stream, TlsStream>;
  static Stream make_stream(tcp::socket socket, HttpServer::Impl& server) {
    if (server.tls) return Stream(std::in_place_type<TlsStream>, std::move(socket), *server.tls);
    return Stream(std::in_place_type<beast::tcp_stream>, std::move(socket));
  }
  // The TCP stream under TLS or not: timeouts, the socket, closing.
  beast::tcp_stream& lowest() {
    return std::visit([](auto& s) -> beast::tcp_stream& { return beast::get_lowest_layer(s); },
                      stream_);
  }

  Stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  std::weak_ptr<HttpResponder> responder_;
  std::string remote_;
  size_t unsent_ = 0;  // the bytes in out_
  bool writing_ = false;
  bool watching_ = false;
  bool responding_ = false;
  bool response_done_ = false;
  bool keep_alive_ = true;
  bool first_request_ = true;
  bool closed_ = false;
};

// ---- HttpResponder ----------------------------------------------------------------------------

HttpResponder::HttpResponder(std::shared_ptr<HttpConnection> connection)
    : connection_(std::move(connection)) {}

HttpResponder::~HttpResponder() {
  // A handler that dropped its responder without answering: the client must not hang.
  if (finished_ || disconnected_ || connection_->server_stopped()) return;
  auto conn = connection_;
  const bool streaming = started_;
  net::post(conn->executor(), [conn, streaming] {
    if (streaming) {
      conn->queue("0\r\n\r\n", true);
    } else {
      conn->respond_whole(500, R"({"error": "internal error: no response"})", "application/json",
                          {});
    }
  });
}

void HttpResponder::add_header(std::string name, std::string value) {
  extra_headers_.emplace_back(std::move(name), std::move(value));
}

void HttpResponder::post(std::function<void()> fn) {
  if (connection_->server_stopped()) return;
  net::post(connection_->executor(), std::move(fn));
}

void HttpResponder::on_disconnect(std::function<void()> fn) {
  post([self = shared_from_this(), fn = std::move(fn)]() mutable {
    if (self->disconnected_) {
      fn();
    } else if (!self->finished_) {
      self->on_disconnect_ = std::move(fn);
    }
  });
}

void HttpResponder::send(int status, std::string body, std::string content_type,
                         HttpHeaders headers) {
  post([self = shared_from_this(), status, body = std::move(body),
        content_type = std::move(content_type), headers = std::move(headers)]() mutable {
    if (self->finished_ || self->started_ || self->disconnected_) return;
    self->finished_ = true;
    self->on_disconnect_ = nullptr;
    headers.insert(headers.end(), self->extra_headers_.begin(), self->extra_headers_.end());
    self->connection_->respond_whole(status, std::move(body), content_type, headers);
  });
}

void HttpResponder::start_stream(int status, std::string content_type, HttpHeaders headers) {
  post([self = shared_from_this(), status, content_type = std::move(content_type),
        headers = std::move(headers)]() mutable {
    if (self->finished_ || self->started_ || self->disconnected_) return;
    self->started_ = true;
    headers.insert(headers.end(), self->extra_headers_.begin(), self->extra_headers_.end());
    headers.emplace_back("Cache-Control", "no-cache");
    headers.emplace_back("X-Accel-Buffering", "no");
    self->connection_->queue(self->connection_->head(status, content_type, headers, std::nullopt),
                             false);
  });
}

void HttpResponder::write(std::string data) {
  if (data.empty()) return;
  post([self = shared_from_this(), data = std::move(data)]() mutable {
    if (!self->started_ || self->finished_ || self->disconnected_) return;
    self->connection_->queue(fmt::format("{:x}\r\n", data.size()) + data + "\r\n", false);
  });
}

void HttpResponder::end() {
  post([self = shared_from_this()] {
    if (!self->started_ || self->finished_ || self->disconnected_) return;
    self->finished_ = true;
    self->on_disconnect_ = nullptr;
    self->connection_->queue("0\r\n\r\n", true);
  });
}

// ---- HttpServer -------------------------------------------------------------------------------

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!accepting || !acceptor.is_open()) return;
    // accept(2)'s errno.
    const int err = ec ? ec.value() : 0;
    if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS) {
      // Out of file descriptors: accepting again at once would spin on the same error while
      // the pending connection waits in the backlog. Wait for connections to close.
      if (!out_of_fds.exchange(true))
        log::warn("accept: {} ({} connections open): retrying every 100 ms", ec.message(),
                  connections.load());
      accept_backoff.expires_after(std::chrono::milliseconds(100));
      accept_backoff.async_wait([this](beast::error_code) { do_accept(); });
      return;
    }
    out_of_fds = false;
    if (!ec) {
      if (config.max_connections > 0 && connections.load() >= config.max_connections) {
        refuse(std::move(socket));
      } else {
        // Streamed tokens are small writes: without TCP_NODELAY, Nagle's algorithm holds each
        // one until the previous is acknowledged, and a client's delayed ACK makes that ~40 ms.
        beast::error_code nodelay_ec;
        socket.set_option(tcp::no_delay(true), nodelay_ec);
        std::make_shared<HttpConnection>(std::move(socket), *this)->start();
      }
    }
    do_accept();
  });
}

void HttpServer::Impl::refuse(tcp::socket socket) {
  // Over --max-connections: a 503 and the connection closed, without reading the request.
  auto sock = std::make_shared<tcp::socket>(std::move(socket));
  static const std::string kBody = R"({"error": {"message": "too many connections", "type": )"
                                   R"("server_error", "code": "too_many_connections"}})";
  auto bytes = std::make_shared<std::string>(fmt::format(
      "HTTP/1.1 503 Service Unavailable\r\nServer: tokenflow\r\nContent-Type: "
      "application/json\r\nRetry-After: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      kBody.size(), kBody));
  net::async_write(*sock, net::buffer(*bytes), [sock, bytes](beast::error_code, size_t) {
    beast::error_code ec;
    sock->shutdown(tcp::socket::shutdown_both, ec);
    sock->close(ec);
  });
}

HttpServer::HttpServer(HttpServerConfig config, HttpHandler handler, HttpErrorFormatter errors)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handler), std::move(errors))) {
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->config.host, ec);
  if (ec) fail("--host '{}' is not an IP address", impl_->config.host);
  const tcp::endpoint ep(address, impl_->config.port);
  if (impl_->config.tls_cert.empty() != impl_->config.tls_key.empty())
    fail("give both --tls-cert and --tls-key");
  if (!impl_->config.tls_cert.empty()) {
    auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    ctx->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                     net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
    ctx->use_certificate_chain_file(impl_->config.tls_cert, ec);
    if (ec) fail("--tls-cert {}: {}", impl_->config.tls_cert, ec.message());
    ctx->use_private_key_file(impl_->config.tls_key, net::ssl::context::pem, ec);
    if (ec) fail("--tls-key {}: {}", impl_->config.tls_key, ec.message());
    impl_->tls = std::move(ctx);
  }
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    fail(ErrorKind::kResourceExhausted, "cannot listen on {}:{}: {}", impl_->config.host,
         impl_->config.port, ec.message());
  }
  port_ = a.local_endpoint().port();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  impl_->do_accept();
  for (int i = 0; i < std::max(1, impl_->config.threads); ++i) {
    threads_.emplace_back([this] { impl_->ioc.run(); });
  }
}

void HttpServer::stop_accepting() {
  impl_->accepting = false;
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_backoff.cancel();
  });
}

bool HttpServer::drain(std::chrono::steady_clock::time_point deadline) {
  while (impl_->in_progress > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::stop() {
  impl_->accepting = false;
  impl_->ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  impl_->stopped = true;
}

int64_t HttpServer::open_connections() const {
  return impl_->connections;
}
int64_t HttpServer::responses_in_progress() const {
  return impl_->in_progress;
}

int64_t HttpServer::slow_reader_streams() const {
  return impl_->slow_readers;
}

}  // namespace tf
