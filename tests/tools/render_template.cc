// Renders one chat template for tests/tokenizer/test_chat_templates.py, which compares the
// output byte for byte with Python's jinja2.
//
//   render_template < {"template": "...", "context": {...}}   rendering on stdout
//   render_template < {"builtin": "llama3", "context": {...}}
//   render_template --builtin-source NAME                     a built-in template's source
//   render_template --builtins                                the built-in names, one a line
//   render_template --lines       one JSON request a line in, one JSON answer a line out
//
// A tf::Error prints "error: <message>" on stderr and exits 1; bad input to this tool exits 2.

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "chat/chat_template.h"
#include "core/error.h"

namespace {

// One request: the rendering, or throws (tf::Error: the template's error; json: bad input).
std::string render_one(const nlohmann::ordered_json& request) {
  const std::string source = request.contains("builtin")
                                 ? tf::builtin_chat_template(request["builtin"].get<std::string>())
                                 : request.at("template").get<std::string>();
  const nlohmann::ordered_json context =
      request.contains("context") ? request["context"] : nlohmann::ordered_json::object();
  tf::ChatTemplateLimits limits;
  if (request.contains("limits")) {
    const auto& l = request["limits"];
    limits.max_output_bytes = l.value("max_output_bytes", limits.max_output_bytes);
    limits.max_steps = l.value("max_steps", limits.max_steps);
    limits.max_depth = l.value("max_depth", limits.max_depth);
    limits.max_time =
        std::chrono::milliseconds(l.value("max_time_ms", int64_t{limits.max_time.count()}));
  }
  return tf::ChatTemplate::parse(source).render(context, limits);
}

// --lines: one JSON request per input line, one JSON answer per output line ({"ok": TEXT},
// {"error": MESSAGE} for a tf::Error, {"bad": MESSAGE} for bad input), flushed after each, so
// that a test renders thousands of templates in one process.
int serve_lines() {
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::ordered_json answer;
    try {
      answer["ok"] = render_one(nlohmann::ordered_json::parse(line));
    } catch (const tf::Error& e) {
      answer["error"] = e.what();
    } catch (const nlohmann::json::exception& e) {
      answer["bad"] = e.what();
    }
    // Invalid UTF-8 in a rendering becomes U+FFFD (and so differs from what jinja2 renders).
    const std::string out = answer.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "--builtin-source") == 0) {
      std::cout << tf::builtin_chat_template(argv[2]);
      return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "--builtins") == 0) {
      for (const std::string& name : tf::builtin_chat_template_names()) std::cout << name << "\n";
      return 0;
    }
    if (argc == 2 && std::strcmp(argv[1], "--lines") == 0) return serve_lines();
    if (argc != 1) {
      std::fprintf(stderr, "usage: %s < {\"template\": ..., \"context\": {...}}\n", argv[0]);
      return 2;
    }
    const std::string input((std::istreambuf_iterator<char>(std::cin)), {});
    nlohmann::ordered_json request;
    try {
      request = nlohmann::ordered_json::parse(input);
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "bad input: %s\n", e.what());
      return 2;
    }
    const std::string out = render_one(request);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const tf::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "bad input: %s\n", e.what());
    return 2;
  }
}
