// tokenflow generate --input-file IN.jsonl --output-file OUT.jsonl: an offline batch job in the
// shape of OpenAI's batch files. Each input line is {"custom_id", "method", "url", "body"} (url
// /v1/completions or /v1/chat/completions) or just a body; each output line, in input order, is
// {"id", "custom_id", "response": {"status_code", "body"}, "error"}. A bad line gets an error line;
// the job goes on. Lines already in OUT are kept and skipped, so an interrupted job resumes.

#include "serving/openai/batch_file.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "chat/tool_calls.h"
#include "core/error.h"
#include "core/json.h"
#include "sampling/grammar.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/openai_render.h"
#include "serving/openai/openai_request.h"

namespace tf {
namespace {

using nlohmann::json;

struct Job {
  size_t line = 0;
  std::string custom_id;
  bool chat = false;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::string model;
  std::string error;  // set when the line could not be turned into a request, or failed
  std::string error_code = "invalid_request";  // "server_error": the engine failed on it
  // Chat: how a choice's message is shaped (tool calls and reasoning parsed as the API does).
  OpenAiShape shape;
};

Job parse_line(const std::string& text, size_t line, const LoadedTokenizer& tok,
               const ModelConfig& cfg, int32_t default_max_tokens,
               const std::function<std::shared_ptr<const GrammarVocab>()>& grammar_vocab,
               const std::shared_ptr<const ChatFormat>& chat) {
  Job job;
  job.line = line;
  try {
    json j = parse_json(text, "batch input");
    if (j.is_discarded() || !j.is_object()) fail("line {} is not a JSON object", line + 1);
    job.custom_id = j.value("custom_id", "line-" + std::to_string(line + 1));
    const json body = j.contains("body") ? j["body"] : j;
    const std::string url =
        j.value("url", body.contains("messages") ? "/v1/chat/completions" : "/v1/completions");
    if (url != "/v1/completions" && url != "/v1/chat/completions")
      fail("unsupported url '{}'", url);
    job.chat = url == "/v1/chat/completions";
    if (!body.is_object()) fail("the body must be a JSON object");
    job.model = body.value("model", "");
    // The same reader and planner as the HTTP API's (unknown fields, beam search, best_of, the
    // context).
    const CompletionRequest req = read_openai_request(body, job.chat, false, [&] {
      auto o = nlohmann::ordered_json::parse(text);
      return o.contains("body") ? o["body"] : o;
    });
    if (req.stream) fail("'stream' is not supported in a batch file");
    if (req.echo) fail("'echo' is not supported in a batch file");
    if (req.prompt_logprobs) fail("'prompt_logprobs' is not supported in a batch file");
    if (!job.chat && req.prompts.size() != 1)
      fail("a batch line holds one prompt, not {}", req.prompts.size());
    GenerationPlan plan =
        plan_request(req, tok, cfg, job.custom_id, default_max_tokens, grammar_vocab, chat);
    job.shape.chat = job.chat;
    job.shape.answer = plan.answer_shape();
    job.prompt = std::move(plan.requests[0].prompt);
    job.params = std::move(plan.requests[0].params);
  } catch (const std::exception& e) {
    job.error = e.what();
  }
  return job;
}

json result_line(const Job& job, const std::vector<CompletedSequence>& seqs,
                 int64_t prompt_tokens) {
  const std::string id = "batch_req_" + std::to_string(job.line + 1);
  if (!job.error.empty()) {
    return {{"id", id},
            {"custom_id", job.custom_id},
            {"response", nullptr},
            {"error", {{"code", job.error_code}, {"message", job.error}}}};
  }
  json choices = json::array();
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    completion_tokens += static_cast<int64_t>(seqs[i].tokens.size());
    json c = {{"index", i}, {"finish_reason", finish_reason_name(seqs[i].finish)}};
    if (job.chat) {  // as the chat API answers (openai_response)
      const char* finish_as = nullptr;
      c["message"] = json(openai_chat_message(job.shape, seqs[i].text, seqs[i].finish, finish_as));
      if (finish_as) c["finish_reason"] = finish_as;
    } else {
      c["text"] = seqs[i].text;
    }
    choices.push_back(std::move(c));
  }
  json body = {{"id", (job.chat ? "chatcmpl-" : "cmpl-") + std::to_string(job.line + 1)},
               {"object", job.chat ? "chat.completion" : "text_completion"},
               {"model", job.model},
               {"choices", choices},
               {"usage",
                {{"prompt_tokens", prompt_tokens},
                 {"completion_tokens", completion_tokens},
                 {"total_tokens", prompt_tokens + completion_tokens}}}};
  return {{"id", id},
          {"custom_id", job.custom_id},
          {"response", {{"status_code", 200}, {"body", body}}},
          {"error", nullptr}};
}

// Complete lines already written (a partial last line from a crash is dropped).
size_t resume_point(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::string content((std::istreambuf_iterator<char>(in)), {});
  size_t lines = 0, keep = 0;
  for (size_t i = 0; i < content.size(); ++i) {
    if (content[i] == '\n') {
      ++lines;
      keep = i + 1;
    }
  }
  if (keep != content.size()) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(keep));
  }
  return lines;
}

}  // namespace

int run_batch_file(Engine& engine, const LoadedTokenizer& tok, const ModelConfig& cfg,
                   const BatchOptions& o) {
  // The vocabulary a line's grammar is compiled against: built once for the file, if a line
  // asks for one.
  std::once_flag vocab_once;
  std::shared_ptr<const GrammarVocab> vocab;
  const std::function<std::shared_ptr<const GrammarVocab>()> grammar_vocab = [&] {
    std::call_once(vocab_once, [&] {
      if (tok.tokenizer) vocab = GrammarVocab::of(*tok.tokenizer);
    });
    return vocab;
  };
  // The model's chat format, its template parsed once for the file (not once per line).
  const std::shared_ptr<const ChatFormat> chat = ChatFormat::for_model(tok, cfg);
  std::ifstream in(o.input_file);
  if (!in) fail(ErrorKind::kNotFound, "cannot open '{}'", o.input_file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(l);
  }
  const size_t done_before = resume_point(o.output_file);
  if (done_before > lines.size()) {
    fail("'{}' has {} lines but the input only {}: not the output of this input", o.output_file,
         done_before, lines.size());
  }
  std::ofstream out(o.output_file, std::ios::binary | std::ios::app);
  if (!out) fail("cannot write '{}'", o.output_file);

  const size_t total = lines.size();
  std::atomic<size_t> next{done_before};
  std::mutex mu;  // guards the in-order writer below
  std::map<size_t, std::string> ready;
  size_t written = done_before;
  std::atomic<int64_t> tokens{0};
  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO) != 0;

  auto progress = [&](bool final) {
    if (!tty && !final) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t done = written - done_before;
    const size_t todo = total - done_before;
    const double eta =
        done > 0 ? s / static_cast<double>(done) * static_cast<double>(todo - done) : 0.0;
    const int width = 30;
    const int filled = todo ? static_cast<int>(width * done / todo) : width;
    std::fprintf(stderr, "%s[%s%s] %zu/%zu lines, %.0f tok/s, ETA %dm%02ds%s", tty ? "\r" : "",
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 written, total, s > 0 ? static_cast<double>(tokens.load()) / s : 0.0,
                 static_cast<int>(eta) / 60, static_cast<int>(eta) % 60, final ? "\n" : "");
  };

  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= total) return;
      Job job = parse_line(lines[i], i, tok, cfg, o.default_max_tokens, grammar_vocab, chat);
      std::vector<CompletedSequence> seqs;
      if (job.error.empty()) {
        try {
          GenerationRequest r;
          r.prompt = job.prompt;
          r.params = job.params;
          seqs = run_to_completion(engine, r);
          for (const auto& s : seqs) {
            if (!s.error.empty()) {
              job.error = s.error;
              job.error_code = "server_error";
            }
          }
          if (job.params.candidates() > job.params.n) {  // best_of: the n most likely
            std::stable_sort(seqs.begin(), seqs.end(), [](const auto& a, const auto& b) {
              return a.cumulative_logprob > b.cumulative_logprob;
            });
            seqs.resize(job.params.n);
          }
        } catch (const std::exception& e) {
          job.error = e.what();
        }
      }
      if (!job.error.empty()) seqs.clear();
      for (const auto& s : seqs) tokens += static_cast<int64_t>(s.tokens.size());
      const std::string line =
          result_line(job, seqs, static_cast<int64_t>(job.prompt.size())).dump() + "\n";
      std::lock_guard<std::mutex> lock(mu);
      ready[i] = line;
      while (!ready.empty() && ready.begin()->first == written) {
        out << ready.begin()->second;
        out.flush();  // a finished line survives an interruption
        ready.erase(ready.begin());
        ++written;
      }
      progress(false);
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, o.concurrency); ++w) workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  progress(true);
  if (done_before > 0) std::fprintf(stderr, "resumed: %zu lines were already done\n", done_before);
  return 0;
}

}  // namespace tf
