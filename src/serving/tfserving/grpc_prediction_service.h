#pragma once
// TF Serving's tensorflow.serving.PredictionService: Classify and Regress run an encoder's head
// over tf.Examples (read into the REST body, classify_plan.h); GetModelMetadata describes the
// generation signature (the REST metadata, as protos), and Predict runs it: the
// input tensors are read as the REST API's columnar "inputs" (prompt or input_ids, and the
// sampling parameters as scalars) into the typed PredictInput and go through the same plan
// (planner.h: plan_predict); the typed outputs (predict_render.h) become tensors (docs/grpc.md).

#include <nlohmann/json.hpp>

#include "serving/grpc/grpc_call.h"
#include "serving/tfserving/predict_render.h"
#include "serving/tfserving/predict_request.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace tf {

class PredictionServiceImpl final : public tfs::PredictionService::CallbackService {
 public:
  explicit PredictionServiceImpl(GrpcContext& ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Classify(grpc::CallbackServerContext* context,
                                     const tfs::ClassificationRequest* request,
                                     tfs::ClassificationResponse* response) override;
  grpc::ServerUnaryReactor* Regress(grpc::CallbackServerContext* context,
                                    const tfs::RegressionRequest* request,
                                    tfs::RegressionResponse* response) override;
  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const tfs::PredictRequest* request,
                                    tfs::PredictResponse* response) override;
  grpc::ServerUnaryReactor* GetModelMetadata(grpc::CallbackServerContext* context,
                                             const tfs::GetModelMetadataRequest* request,
                                             tfs::GetModelMetadataResponse* response) override;

 private:
  GrpcContext& ctx_;
};

// At most this many elements in one request tensor (a shape's product, also for the one-value
// shorthand that fills a shape): a batch of 64 prompts of 16k tokens, far below the 8 MiB message.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 20;
// The element count of a shape, checked for negative dimensions, overflow and the limit above
// (HttpError 400 naming the input).
int64_t tensor_element_count(const std::vector<int64_t>& dims, const std::string& name);
// Throws HttpError 400 unless `values` values fill a shape of `count` elements: exactly, or one
// typed value (not packed tensor_content) as TensorFlow's shorthand.
void check_value_count(int64_t values, int64_t count, bool packed, const std::string& name);

// A tensor's values as JSON: a scalar (rank 0), a list (rank 1) or a list of lists (rank 2),
// from the typed field or the packed tensor_content. Throws HttpError 400 naming the input for
// an unsupported type, a higher rank or a value count that does not fit the shape.
nlohmann::json tensor_to_json(const tensorflow::TensorProto& t, const std::string& name);

// The REST :classify / :regress body of a Classify or Regress request's Input:
// {"context"?: {...}, "examples": [{...}]}, each feature's bytes a string (a list for several),
// floats and int64s numbers. HttpError 400 for an Input without examples.
nlohmann::json classify_body_of(const tfs::Input& input, const std::string& signature_name);

// The REST predict body of a PredictRequest's inputs: {"inputs": {...}}.
nlohmann::json predict_body_of(const tfs::PredictRequest& request);
// A PredictRequest read as the typed Predict input, with the REST reader's checks and messages.
PredictInput read_predict_request(const tfs::PredictRequest& request, bool log_prompt = false);

// The outputs of a finished Predict job as tensors (output_filter: the ones asked for, empty for
// all): text and finish_reason [batch] strings, output_ids [batch, longest] padded with -1,
// output_lengths [batch], logprobs [batch, longest] padded with 0 when any instance asked.
void predict_response_proto(const PredictOutputs& outputs,
                            const google::protobuf::RepeatedPtrField<std::string>& output_filter,
                            tfs::PredictResponse* response);

}  // namespace tf
