#pragma once
// tokenflow.v1.GenerationService (proto/tokenflow/v1/generation.proto) on gRPC's callback API:
// no thread per call; a call's engine outputs are drained on its strand and written one message
// at a time. A GenerateRequest is read into the typed request every door reads into
// (completion_request.h) and goes through the same planner as a REST request (planner.h), so
// parameters, defaults, validation, limits, keys and results are the REST API's.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "serving/core/completion_request.h"
#include "serving/core/job_summary.h"
#include "serving/grpc/grpc_call.h"
#include "tokenflow/v1/generation.grpc.pb.h"

namespace tf {

namespace v1 = tokenflow::v1;

class GenerationServiceImpl final : public v1::GenerationService::CallbackService {
 public:
  explicit GenerationServiceImpl(GrpcContext& ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

 private:
  GrpcContext& ctx_;
};

// A GenerateRequest read as the typed request (stream: GenerateStream), with REST's checks and
// messages (apply_request_rules, the same field errors). HttpError 400 naming the field.
// log_prompt: keep the prompt for the access log.
CompletionRequest read_generate_request(const v1::GenerateRequest& request, bool stream,
                                        bool log_prompt = false);

// The answers as pure functions of what came out. A unary response: the returned sequences of
// every prompt (summary.returned), logprobs when asked, the usage.
void generate_response_proto(const std::vector<std::vector<GeneratedSequence>>& results,
                             const JobSummary& summary, bool logprobs, const Tokenizer* tokenizer,
                             v1::GenerateResponse* response);
// One stream output as a step message, or nullopt when it carries nothing (no tokens, text or
// finish) or belongs to a beam beyond the n returned.
std::optional<v1::GenerateStreamResponse> stream_step_proto(const RequestOutput& out, int32_t n,
                                                            bool logprobs,
                                                            const Tokenizer* tokenizer);
// The last message of a stream: the returned sequences' finish reasons and the usage.
v1::GenerateStreamResponse stream_end_proto(
    const std::string& id, const std::string& model, int64_t version,
    const std::vector<std::vector<GeneratedSequence>>& results, const JobSummary& summary);

}  // namespace tf
