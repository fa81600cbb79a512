#pragma once
// tokenflow.v1.GenerationService (proto/tokenflow/v1/generation.proto) on gRPC's callback API:
// no thread per call; a call's engine outputs are drained on its strand and written one message
// at a time. A GenerateRequest becomes the OpenAI body it stands for and goes through the same
// plan as a REST request (openai_api.h: plan_generation), so parameters, defaults, validation,
// limits, keys and results are the REST API's.

#include <nlohmann/json.hpp>

#include "serving/grpc_call.h"
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

// The OpenAI completions body (chat = false) or chat completions body (chat = true) a
// GenerateRequest stands for; stream sets "stream". Throws HttpError 400 without a prompt.
nlohmann::json openai_body_of(const v1::GenerateRequest& request, bool stream, bool& chat);

}  // namespace tf
