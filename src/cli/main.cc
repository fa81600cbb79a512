// tokenflow: one binary for every job. Errors print one line to stderr and exit non-zero.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  // Called as tensorflow_model_server (a symlink, or a container's command): TF Serving's
  // command line, as the subcommand of that name.
  std::vector<char*> args(argv, argv + argc);
  std::string tf_serving = "tensorflow_model_server";
  const std::string_view self = argc > 0 ? std::string_view(argv[0]) : std::string_view();
  if (self.substr(self.find_last_of('/') + 1) == tf_serving)
    args.insert(args.begin() + 1, tf_serving.data());
  CLI::App app{"tokenflow: fast LLM inference and serving"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  std::map<CLI::App*, tf::cli::Action> actions;
  auto add = [&](const char* name, const char* help, auto adder) {
    CLI::App* sub = app.add_subcommand(name, help);
    actions[sub] = adder(*sub);
  };
  add("serve", "Serve models over HTTP (OpenAI and TF Serving APIs)", tf::cli::add_serve);
  add("tensorflow_model_server",
      "Serve with TF Serving's command line (--port gRPC, --rest_api_port, --model_name, "
      "--model_base_path, --model_config_file, ...)",
      tf::cli::add_tf_model_server);
  add("generate", "Generate text from a prompt, streamed to stdout", tf::cli::add_generate);
  add("quantize",
      "Write a model's weights packed as int8, q4, bf16 or f16 (a GGUF: re-quantized to another "
      "GGUF type)",
      tf::cli::add_quantize);
  add("convert", "Write a Hugging Face or llama2.c model as GGUF, quantized in the same pass",
      tf::cli::add_convert);
  add("inspect", "Describe a model file or directory", tf::cli::add_inspect);
  add("tokenize", "Turn text into token ids, or ids into text", tf::cli::add_tokenize);
  add("embed",
      "Embed, score or classify texts (and text pairs) with an encoder model (BERT, RoBERTa, "
      "XLM-R)",
      tf::cli::add_embed);
  add("bench", "Measure throughput and latency of many requests", tf::cli::add_bench);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    tf::set_log_level(log_level);
    for (auto& [sub, action] : actions) {
      if (sub->parsed()) return action();
    }
  } catch (const tf::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
