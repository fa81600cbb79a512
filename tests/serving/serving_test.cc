// Unit tests of the serving layer's pure parts: TF Serving model paths, error bodies, best_of.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <mutex>

#include "serving/core/api_common.h"
#include "serving/core/generation_job.h"
#include "serving/core/job_host.h"
#include "serving/core/job_summary.h"
#include "serving/core/planner.h"
#include "serving/core/prompt.h"
#include "serving/core/request_fields.h"
#include "serving/grpc/grpc_generation.h"
#include "serving/http/routes.h"
#include "serving/openai/openai_api.h"
#include "serving/openai/openai_request.h"
#include "serving/tfserving/predict_plan.h"
#include "serving/tfserving/tfserving_api.h"

namespace tf {
namespace {

TEST(ModelPath, ParsesTfServingGrammar) {
  auto p = parse_model_path("half_plus_two");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->name, "half_plus_two");
  EXPECT_FALSE(p->version || p->label || p->metadata);
  p = parse_model_path("m/versions/123/metadata");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p->version, 123);
  EXPECT_TRUE(p->metadata);
  p = parse_model_path("m/labels/canary:predict");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p->label, "canary");
  EXPECT_EQ(p->verb, "predict");
  p = parse_model_path("m:predict");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->verb, "predict");
  for (const char* bad : {"", "m/versions/x", "m/versions/", "m/versions/1/extra", "m/other", "/m",
                          "m/labels", "m/versions/99999999999999999999"}) {
    EXPECT_FALSE(parse_model_path(bad)) << bad;
  }
}

TEST(RouteTable, ExactPathsFirstThenTheLongestPrefixAndMethodsChecked) {
  RouteTable t;
  std::string hit;
  auto mark = [&hit](const char* name) { return [&hit, name](RouteCall&) { hit = name; }; };
  t.add("GET", "/v1/models", mark("list"));
  t.add("GET", "/v1/models/", mark("list/"));
  t.add_prefix("*", "/v1/models/", mark("models/*"));
  t.add_prefix("POST", "/v1/models/x/", mark("x/*"));
  t.add("POST", "/v1/chat/completions", mark("chat"));
  auto route = [&](const char* method, const char* path) {
    hit.clear();
    auto m = t.find(method, path);
    if (!m) return std::string("none");
    HttpRequest req;
    RouteCall call{req, nullptr, nullptr, m->rest};
    m->route->handler(call);
    return hit + "|" + m->rest;
  };
  EXPECT_EQ(route("GET", "/v1/models"), "list|");
  EXPECT_EQ(route("GET", "/v1/models/"), "list/|");
  EXPECT_EQ(route("GET", "/v1/models/a:predict"), "models/*|a:predict");
  EXPECT_EQ(route("POST", "/v1/models/x/y"), "x/*|y");
  EXPECT_EQ(route("POST", "/v1/chat/completions"), "chat|");
  EXPECT_EQ(route("GET", "/v2/nothing"), "none");
  // A path held for other methods: 405 naming them.
  try {
    t.find("GET", "/v1/chat/completions");
    ADD_FAILURE() << "no 405";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 405);
    EXPECT_STREQ(e.what(), "/v1/chat/completions takes POST requests");
  }
  // The longest prefix holds /v1/models/x/... : a GET there is not the shorter prefix's.
  EXPECT_THROW(t.find("GET", "/v1/models/x/y"), HttpError);
  // A path claimed twice (or by "*" beside a method) is refused when it is added.
  EXPECT_THROW(t.add("POST", "/v1/chat/completions", mark("again")), Error);
  EXPECT_THROW(t.add_prefix("GET", "/v1/models/", mark("again")), Error);
  EXPECT_NO_THROW(t.add("GET", "/v1/chat/completions", mark("get")));
}

TEST(ErrorBody, OpenAiShapeWithStatusTypeAndParam) {
  auto j = nlohmann::json::parse(openai_error_body(400, "'temperature' must be a number"));
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], "invalid_parameter");
  j = nlohmann::json::parse(openai_error_body(404, "no such model", "model_not_found", "model"));
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  EXPECT_EQ(j["error"]["param"], "model");
  j = nlohmann::json::parse(openai_error_body(503, "busy"));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(http_status_of(Error(ErrorKind::kNotFound, "x")), 404);
  EXPECT_EQ(http_status_of(Error(ErrorKind::kInternal, "x")), 500);
  EXPECT_EQ(http_status_of(HttpError(413, "x")), 413);
  EXPECT_EQ(http_status_of(std::runtime_error("x")), 500);
  // Odd bytes never make the JSON writer throw.
  EXPECT_NO_THROW(dump_json(nlohmann::json{{"text", std::string("\xff\xfe", 2)}}));
}

// A model whose every step fails.
class FailingModel final : public Model {
 public:
  explicit FailingModel(ModelConfig c) : Model(std::move(c), WeightStore()) {}

 protected:
  void run(std::span<const SequenceChunk>, std::span<const TokenPosition>, KvCache&, float*,
           ThreadPool&) override {
    throw std::runtime_error("injected model failure");
  }
};

// Runs posted work at once, one at a time.
class InlineHost final : public JobHost {
 public:
  void post(std::function<void()> fn) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    fn();
  }
  void on_disconnect(std::function<void()>) override {}
  bool disconnected() const override { return false; }

 private:
  std::recursive_mutex mu_;
};

// A job the engine fails on sums up as a server error, which every API answers as one (500 /
// INTERNAL), not as a 200 whose choices end in "abort" or a deadline.
TEST(JobSummary, AnEngineFailureIsAServerError) {
  ModelConfig c;
  c.architecture = "Failing";
  c.vocab_size = 8;
  c.dim = c.head_dim = c.ffn_dim = 8;
  c.n_layers = c.n_heads = c.n_kv_heads = 1;
  c.max_seq_len = 64;
  FailingModel model(c);
  EngineConfig ec;
  ec.kv_cache_bytes = 16 * KvCache::bytes_per_block(c, 16);
  ec.threads = 1;
  // Before the engine, so that it outlives the engine thread's last use of it (the job leaves
  // the registry after its done callback has run: ThreadSanitizer saw the test's end race it).
  JobRegistry registry;
  Engine engine(model, nullptr, {}, ec);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  JobEnd end;
  JobPlan plan;
  plan.time_limit = std::chrono::hours(1);
  RequestRecord record;
  record.received = std::chrono::steady_clock::now();
  std::vector<GenerationRequest> reqs(2);
  for (auto& r : reqs) {
    r.prompt = {1, 2, 3};
    r.params.max_tokens = 4;
  }
  GenerationJob::start(engine, std::move(reqs), std::make_shared<InlineHost>(), registry, nullptr,
                       [&](const GenerationJob& job, bool client_gone) {
                         EXPECT_FALSE(client_gone);
                         std::lock_guard<std::mutex> lock(mu);
                         end = decide_end(plan, job, record, client_gone);
                         done = true;
                         cv.notify_all();
                       });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  const JobSummary& summary = end.summary;
  EXPECT_NE(summary.error.find("internal error"), std::string::npos) << summary.error;
  EXPECT_FALSE(summary.timed_out);
  EXPECT_EQ(end.outcome, JobOutcome::kFailed);
  EXPECT_EQ(http_status(end), 500);
  const grpc::Status status = grpc_status(end, nullptr);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(status.error_message(), summary.error);
  // The one mapping of each outcome, to HTTP and to gRPC.
  JobEnd e;
  e.time_limit = std::chrono::milliseconds(1500);
  EXPECT_EQ(http_status(e), 200);
  EXPECT_TRUE(grpc_status(e, nullptr).ok());
  e.outcome = JobOutcome::kTimedOut;
  EXPECT_EQ(http_status(e), 504);
  EXPECT_EQ(grpc_status(e, nullptr).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(grpc_status(e, nullptr).error_message(), deadline_message(e.time_limit));
  e.outcome = JobOutcome::kFailed;
  e.summary.error = "a grammar ran past its budget";
  e.summary.error_kind = ErrorKind::kResourceExhausted;
  EXPECT_EQ(http_status(e), 400);
  EXPECT_EQ(grpc_status(e, nullptr).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  e.outcome = JobOutcome::kClientGone;
  EXPECT_EQ(http_status(e), 499);
}

TEST(BestOf, KeepsTheMostLikelyBestFirst) {
  std::vector<GeneratedSequence> seqs(4);
  const double lp[] = {-3.0, -1.0, -2.0, -1.0};
  for (int i = 0; i < 4; ++i) seqs[i].cumulative_logprob = lp[i];
  EXPECT_EQ(best_sequences(seqs, 2), (std::vector<size_t>{1, 3}));
  EXPECT_EQ(best_sequences(seqs, 9).size(), 4u);
}

// Errors carry their field (FieldError), not a message for field_of to read: every parameter
// check names the body's field, chat's max_completion_tokens included.
TEST(PlanErrors, NameTheFieldTheyAreAbout) {
  ModelConfig cfg;
  cfg.vocab_size = 512;
  cfg.max_seq_len = 512;
  const LoadedTokenizer none;  // prompts as token ids
  auto param = [&](const char* text, bool chat) -> std::string {
    try {
      plan_request(read_openai_request(nlohmann::json::parse(text), chat), none, cfg, "id");
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << text;
      return e.param();
    }
    return "(accepted)";
  };
  EXPECT_EQ(param(R"({"prompt": [1], "temperature": -1})", false), "temperature");
  EXPECT_EQ(param(R"({"prompt": [1], "top_p": 1.5})", false), "top_p");
  EXPECT_EQ(param(R"({"prompt": [1], "n": 0})", false), "n");
  EXPECT_EQ(param(R"({"prompt": [1], "stop_token_ids": [9999]})", false), "stop_token_ids");
  EXPECT_EQ(param(R"({"prompt": [1], "seed": "x"})", false), "seed");
  EXPECT_EQ(param(R"({"prompt": [[1], "x"]})", false), "prompt");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "hi"}],
                     "max_completion_tokens": 0})",
                  true),
            "max_completion_tokens");
  EXPECT_EQ(param(R"({"prompt": [1], "max_tokens": 4})", false), "(accepted)");
}

// Predict's instances are completions requests of one prompt: the row and columnar forms read
// as the OpenAI body with the same parameters would (max_tokens counts as given: 16 unless set).
TEST(PredictRequest, InstancesAreCompletionRequests) {
  using nlohmann::json;
  const PredictInput rows = read_predict_body(json::parse(
      R"({"instances": [{"prompt": "Hi", "temperature": 0.5, "max_tokens": 3}, [1, 2]]})"));
  EXPECT_TRUE(rows.rows);
  ASSERT_EQ(rows.instances.size(), 2u);
  EXPECT_EQ(
      rows.instances[0],
      read_openai_request(json{{"prompt", "Hi"}, {"temperature", 0.5}, {"max_tokens", 3}}, false));
  EXPECT_EQ(rows.instances[1].prompts, (std::vector<PromptInput>{{false, {}, {1, 2}}}));
  EXPECT_TRUE(rows.instances[1].max_tokens_given);
  EXPECT_EQ(rows.instances[1].params.max_tokens, 16);
  const PredictInput cols =
      read_predict_body(json::parse(R"({"inputs": {"prompt": ["a", "b"], "temperature": 0.25}})"));
  EXPECT_FALSE(cols.rows);
  ASSERT_EQ(cols.instances.size(), 2u);
  EXPECT_EQ(cols.instances[1].prompts[0].text, "b");
  EXPECT_EQ(cols.instances[1].params.temperature, 0.25f);
  auto message = [](const char* text) -> std::string {
    try {
      read_predict_body(json::parse(text));
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << text;
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(message(R"({"instances": [{"prompt": "a", "n": 2}]})"), "unknown input 'n'");
  EXPECT_EQ(message(R"({"inputs": {"prompt": "a", "input_ids": [1]}})"),
            "'inputs' needs exactly one of 'prompt' or 'input_ids'");
  EXPECT_EQ(message(R"({"instances": [], "inputs": {}})"),
            "Request body must have either 'instances' or 'inputs', not both");
  EXPECT_EQ(message(R"({"instances": [{"prompt": "a", "temperature": "hot"}]})"),
            "'temperature' must be a number");
}

// The planner's defaults: OpenAI's 16 for completions, the room the context leaves for chat, a
// batch file's own default; every prompt its own engine request.
TEST(Planner, DefaultsAndOneEngineRequestPerPrompt) {
  using nlohmann::json;
  ModelConfig cfg;
  cfg.vocab_size = 512;
  cfg.max_seq_len = 64;
  const LoadedTokenizer none;
  const GenerationPlan two = plan_request(
      read_openai_request(json{{"prompt", {{1, 2}, {3, 4, 5}}}}, false), none, cfg, "cmpl-x");
  ASSERT_EQ(two.requests.size(), 2u);
  EXPECT_EQ(two.requests[0].id, "cmpl-x-0");
  EXPECT_EQ(two.requests[1].prompt, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(two.requests[0].params.max_tokens, 16);
  const GenerationPlan batch =
      plan_request(read_openai_request(json{{"prompt", {1, 2, 3, 4}}}, false), none, cfg, "b", 100);
  EXPECT_EQ(batch.requests[0].params.max_tokens, 60);  // 100, lowered to the room
  const GenerationPlan given = plan_request(
      read_openai_request(json{{"prompt", {1}}, {"max_tokens", 5}, {"priority", -2}}, false), none,
      cfg, "g");
  EXPECT_EQ(given.requests[0].params.max_tokens, 5);
  EXPECT_EQ(given.requests[0].priority, -2);
  try {
    plan_request(read_openai_request(json{{"prompt", {1, 600}}}, false), none, cfg, "v");
    FAIL() << "a token id outside the vocabulary was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.param(), "prompt");
    EXPECT_STREQ(e.what(), "prompt token id 600 is outside the vocabulary (0..511)");
  }
}

}  // namespace
}  // namespace tf
