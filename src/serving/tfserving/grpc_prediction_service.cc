#include "serving/tfserving/grpc_prediction_service.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <cstring>
#include <set>

#include "serving/grpc/grpc_call.h"
#include "serving/tfserving/classify_plan.h"
#include "serving/tfserving/predict_plan.h"
#include "serving/tfserving/tfserving_api.h"

namespace tf {
namespace {

using json = nlohmann::json;
constexpr const char* kPredictionService = "tensorflow.serving.PredictionService";

// Values of type T: the repeated field, else tensor_content read as little-endian T (not both:
// TF Serving takes one or the other, and a silent choice would answer a different prompt).
template <typename T, typename Field>
std::vector<T> values(const tensorflow::TensorProto& t, const Field& field,
                      const std::string& name) {
  if (t.tensor_content().empty()) return std::vector<T>(field.begin(), field.end());
  if (!field.empty())
    throw HttpError(400, fmt::format("input '{}' has both tensor_content and typed values; "
                                     "send one of them",
                                     name));
  const std::string& raw = t.tensor_content();
  if (raw.size() % sizeof(T) != 0)
    throw HttpError(400, fmt::format("input '{}': tensor_content of {} bytes is not a whole "
                                     "number of {}-byte values",
                                     name, raw.size(), sizeof(T)));
  std::vector<T> out(raw.size() / sizeof(T));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

}  // namespace

int64_t tensor_element_count(const std::vector<int64_t>& dims, const std::string& name) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) throw HttpError(400, fmt::format("input '{}' has an unknown dimension", name));
    // Checked: a shape such as [2^62, 4] must not wrap to a small count, nor [2^62, 0] make
    // 2^62 empty rows.
    if (d > kMaxTensorElements || __builtin_mul_overflow(count, d, &count) ||
        count > kMaxTensorElements)
      throw HttpError(400, fmt::format("input '{}' has a shape of more than {} elements", name,
                                       kMaxTensorElements));
  }
  return count;
}

void check_value_count(int64_t values, int64_t count, bool packed, const std::string& name) {
  // One typed value may fill the shape (TensorFlow's shorthand); packed tensor_content must
  // match it exactly, as TF Serving requires.
  if (values == count || (!packed && values == 1 && count >= 1)) return;
  throw HttpError(
      400, fmt::format("input '{}' has {} values for a shape of {} elements", name, values, count));
}

namespace {

json shape_values(std::vector<json> flat, const std::vector<int64_t>& dims,
                  const std::string& name) {
  if (dims.empty()) return flat[0];
  if (dims.size() == 1) return json(std::move(flat));
  if (dims.size() == 2) {
    json rows = json::array();
    for (int64_t r = 0; r < dims[0]; ++r)
      rows.push_back(
          json(std::vector<json>(flat.begin() + r * dims[1], flat.begin() + (r + 1) * dims[1])));
    return rows;
  }
  throw HttpError(400,
                  fmt::format("input '{}' has rank {}; at most 2 is taken", name, dims.size()));
}

tensorflow::TensorProto string_tensor(const std::vector<std::string>& v) {
  tensorflow::TensorProto t;
  t.set_dtype(tensorflow::DT_STRING);
  t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(v.size()));
  for (const auto& s : v) t.add_string_val(s);
  return t;
}

// Rows of different lengths as one [rows, longest] tensor, padded with pad.
template <typename T>
tensorflow::TensorProto padded_tensor(const std::vector<std::vector<T>>& rows, T pad) {
  tensorflow::TensorProto t;
  t.set_dtype(std::is_same_v<T, float> ? tensorflow::DT_FLOAT : tensorflow::DT_INT32);
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(rows.size()));
  t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(width));
  for (const auto& r : rows) {
    for (size_t i = 0; i < width; ++i) {
      const T v = i < r.size() ? r[i] : pad;
      if constexpr (std::is_same_v<T, float>) {
        t.add_float_val(v);
      } else {
        t.add_int_val(v);
      }
    }
  }
  return t;
}

// The version a TF Serving request's model_spec addresses (TF Serving's 400 and 404 messages).
std::shared_ptr<ServedModel> resolve_spec(GrpcContext& ctx, GrpcCall& call,
                                          const tfs::ModelSpec& model_spec,
                                          std::shared_ptr<const LoraAdapter>* lora = nullptr) {
  const ModelRequestSpec spec = model_spec_of(model_spec);
  auto model = resolve_servable(ctx.state, *call.record, spec.name, spec.version, spec.label,
                                call.header_fn(), lora);
  call.record->model = lora && *lora ? spec.name : model->name;
  call.record->version = model->version;
  return model;
}

// The model_spec of an answer: the version and the signature that answered.
// name: the model's, or a LoRA adapter's (answered under the name it was asked by, on its base's
// version).
void answered_spec(const ServedModel& model, const std::string& signature, tfs::ModelSpec* out,
                   const std::string& name = "") {
  out->set_name(name.empty() ? model.name : name);
  out->mutable_version()->set_value(model.version);
  out->set_signature_name(signature);
}

}  // namespace

json tensor_to_json(const tensorflow::TensorProto& t, const std::string& name) {
  std::vector<int64_t> dims;
  for (const auto& d : t.tensor_shape().dim()) dims.push_back(d.size());
  // The shape first: bounded and overflow-checked before any value is decoded or expanded.
  if (dims.size() > 2)
    throw HttpError(400,
                    fmt::format("input '{}' has rank {}; at most 2 is taken", name, dims.size()));
  const int64_t count = tensor_element_count(dims, name);
  std::vector<json> flat;
  auto take = [&](const auto& vals) {
    check_value_count(static_cast<int64_t>(vals.size()), count, !t.tensor_content().empty(), name);
    flat.reserve(vals.size());
    for (const auto& v : vals) flat.emplace_back(v);
  };
  switch (t.dtype()) {
    case tensorflow::DT_STRING:
      if (!t.tensor_content().empty())
        throw HttpError(400, fmt::format("input '{}': DT_STRING values go in string_val, not "
                                         "tensor_content",
                                         name));
      take(t.string_val());
      break;
    case tensorflow::DT_INT32:
      take(values<int32_t>(t, t.int_val(), name));
      break;
    case tensorflow::DT_INT64:
      take(values<int64_t>(t, t.int64_val(), name));
      break;
    case tensorflow::DT_FLOAT:
      take(values<float>(t, t.float_val(), name));
      break;
    case tensorflow::DT_DOUBLE:
      take(values<double>(t, t.double_val(), name));
      break;
    case tensorflow::DT_BOOL: {
      // One byte a value in tensor_content; values<> applies the same rules as the other types.
      const std::vector<uint8_t> bytes = values<uint8_t>(t, t.bool_val(), name);
      take(std::vector<bool>(bytes.begin(), bytes.end()));
      break;
    }
    default:
      throw HttpError(400, fmt::format("input '{}' has type {}; DT_STRING, DT_INT32, DT_INT64, "
                                       "DT_FLOAT, DT_DOUBLE and DT_BOOL are taken",
                                       name, tensorflow::DataType_Name(t.dtype())));
  }
  // TensorFlow's shorthand: one typed value fills the whole shape (count is bounded above, and
  // so are the bytes a string fills it with).
  if (flat.size() == 1 && count > 1) {
    if (flat[0].is_string() &&
        static_cast<double>(flat[0].get_ref<const std::string&>().size() + 1) *
                static_cast<double>(count) >
            static_cast<double>(kMaxTensorElements) * 16)
      throw HttpError(400, fmt::format("input '{}': one string of {} bytes filling a shape of {} "
                                       "elements is more than {} MiB",
                                       name, flat[0].get_ref<const std::string&>().size(), count,
                                       kMaxTensorElements * 16 >> 20));
    flat.assign(static_cast<size_t>(count), flat[0]);
  }
  return shape_values(std::move(flat), dims, name);
}

void predict_response_proto(const PredictOutputs& out,
                            const google::protobuf::RepeatedPtrField<std::string>& output_filter,
                            tfs::PredictResponse* response) {
  const std::set<std::string> wanted(output_filter.begin(), output_filter.end());
  auto want = [&](const char* name) { return wanted.empty() || wanted.count(name) > 0; };
  auto& outputs = *response->mutable_outputs();
  if (want("text")) outputs["text"] = string_tensor(out.text);
  if (want("output_ids")) outputs["output_ids"] = padded_tensor<int32_t>(out.output_ids, -1);
  if (want("output_lengths")) {
    tensorflow::TensorProto t;
    t.set_dtype(tensorflow::DT_INT32);
    t.mutable_tensor_shape()->add_dim()->set_size(static_cast<int64_t>(out.output_ids.size()));
    for (const auto& row : out.output_ids) t.add_int_val(static_cast<int32_t>(row.size()));
    outputs["output_lengths"] = t;
  }
  if (want("finish_reason")) outputs["finish_reason"] = string_tensor(out.finish_reason);
  if (want("logprobs") && out.any_logprobs())
    outputs["logprobs"] = padded_tensor<float>(out.logprobs, 0.0f);
}

PredictInput read_predict_request(const tfs::PredictRequest& request, bool log_prompt) {
  return read_predict_body(predict_body_of(request), log_prompt);
}

json predict_body_of(const tfs::PredictRequest& request) {
  json inputs = json::object();
  for (const auto& [name, tensor] : request.inputs()) {
    json v = tensor_to_json(tensor, name);
    // A sampling parameter sent as a one-element tensor ([1], as clients often shape them) is
    // the scalar; the prompts and the list parameters keep their lists.
    const bool list = name == "prompt" || name == "input_ids" || name == "stop" ||
                      name == "stop_token_ids" || name == "attention_mask" ||
                      name == "bad_words_ids";
    if (!list && v.is_array() && v.size() == 1) v = json(v[0]);
    inputs[name] = std::move(v);
  }
  json body = {{"inputs", inputs}};
  if (!request.model_spec().signature_name().empty())
    body["signature_name"] = request.model_spec().signature_name();
  return body;
}

json classify_body_of(const tfs::Input& input, const std::string& signature_name) {
  // A tf.Example's features as REST's: bytes as strings (one, or a list), numbers as numbers.
  auto features = [](const tensorflow::Example& e) {
    json out = json::object();
    for (const auto& [name, f] : e.features().feature()) {
      json v = json::array();
      if (f.has_bytes_list()) {
        for (const std::string& b : f.bytes_list().value()) v.push_back(b);
        if (v.size() == 1) v = v[0];
      } else if (f.has_float_list()) {
        for (float x : f.float_list().value()) v.push_back(x);
      } else if (f.has_int64_list()) {
        for (int64_t x : f.int64_list().value()) v.push_back(x);
      }
      out[name] = std::move(v);
    }
    return out;
  };
  json body = json::object();
  const google::protobuf::RepeatedPtrField<tensorflow::Example>* examples = nullptr;
  if (input.has_example_list()) {
    examples = &input.example_list().examples();
  } else if (input.has_example_list_with_context()) {
    examples = &input.example_list_with_context().examples();
    body["context"] = features(input.example_list_with_context().context());
  }
  if (!examples || examples->empty())
    throw HttpError(400, "Input is empty: give example_list or example_list_with_context");
  json list = json::array();
  for (const auto& e : *examples) list.push_back(features(e));
  body["examples"] = std::move(list);
  if (!signature_name.empty()) body["signature_name"] = signature_name;
  return body;
}

namespace {

// Classify and Regress: the request's examples planned as REST's body, answered by fill.
template <typename Request, typename Response, typename Fill>
grpc::ServerUnaryReactor* classify_call(GrpcContext& ctx, grpc::CallbackServerContext* context,
                                        const char* method, const Request* request,
                                        Response* response, bool regress, Fill fill) {
  GrpcCallbackScope scope;
  auto* r = new UnaryJobCall(ctx, context, kPredictionService, method);
  prepare_call(
      ctx, *r->host, *r->call.record, [&ctx, r, context, request, response, regress, fill] {
        try {
          r->call.admit();
          auto model = resolve_spec(ctx, r->call, request->model_spec());
          context->AddInitialMetadata("x-model-version", std::to_string(model->version));
          auto plan = std::make_shared<const ClassifyPlan>(plan_classify(
              ctx.state, model,
              classify_body_of(request->input(), request->model_spec().signature_name()),
              *r->call.record, regress));
          run_job(ctx.state, plan->plan, r->host, r->call.record,
                  std::make_shared<GrpcJobSink>(
                      nullptr,
                      [r, plan, response, fill](const JobEnd& end, const GenerationJob& job) {
                        if (!end.ok()) return r->finish(grpc_status(end, r->server_ctx));
                        fill(classify_answer(*plan, job), response);
                        answered_spec(*plan->plan->model, "serving_default",
                                      response->mutable_model_spec());
                        r->finish(grpc::Status::OK);
                      },
                      [r](const std::exception& e) { r->finish(r->call.error_status(e)); }));
        } catch (const std::exception& e) {
          r->finish(r->call.error_status(e));
        }
      });
  return r;
}

}  // namespace

grpc::ServerUnaryReactor* PredictionServiceImpl::Classify(grpc::CallbackServerContext* context,
                                                          const tfs::ClassificationRequest* request,
                                                          tfs::ClassificationResponse* response) {
  return classify_call(ctx_, context, "Classify", request, response, false,
                       [](const ClassifyAnswer& a, tfs::ClassificationResponse* out) {
                         for (const auto& row : a.classes) {
                           auto* c = out->mutable_result()->add_classifications();
                           for (const auto& [label, p] : row) {
                             auto* k = c->add_classes();
                             k->set_label(label);
                             k->set_score(p);
                           }
                         }
                       });
}

grpc::ServerUnaryReactor* PredictionServiceImpl::Regress(grpc::CallbackServerContext* context,
                                                         const tfs::RegressionRequest* request,
                                                         tfs::RegressionResponse* response) {
  return classify_call(ctx_, context, "Regress", request, response, true,
                       [](const ClassifyAnswer& a, tfs::RegressionResponse* out) {
                         for (float v : a.values)
                           out->mutable_result()->add_regressions()->set_value(v);
                       });
}

grpc::ServerUnaryReactor* PredictionServiceImpl::Predict(grpc::CallbackServerContext* context,
                                                         const tfs::PredictRequest* request,
                                                         tfs::PredictResponse* response) {
  GrpcCallbackScope scope;
  auto* r = new UnaryJobCall(ctx_, context, kPredictionService, "Predict");
  // Parsed and tokenized on the preparation pool; r and the request live until r->finish.
  prepare_call(ctx_, *r->host, *r->call.record, [this, r, context, request, response] {
    try {
      r->call.admit();
      std::shared_ptr<const LoraAdapter> lora;
      auto model = resolve_spec(ctx_, r->call, request->model_spec(), &lora);
      context->AddInitialMetadata("x-model-version", std::to_string(model->version));
      auto plan = std::make_shared<PredictPlan>(plan_predict(
          ctx_.state, model, read_predict_request(*request, logs_prompts(*r->call.record)),
          *r->call.record, r->call.time_limit(), lora, request->model_spec().name()));
      static const std::set<std::string> kOutputs = {"text", "output_ids", "output_lengths",
                                                     "finish_reason", "logprobs"};
      for (const auto& f : request->output_filter()) {
        if (plan->generate ? f != plan->output_name : !kOutputs.count(f))
          throw HttpError(400, fmt::format("output tensor alias not found in signature: {}", f));
      }
      run_job(ctx_.state, plan, r->host, r->call.record,
              std::make_shared<GrpcJobSink>(
                  nullptr,
                  [r, plan, request, response](const JobEnd& end, const GenerationJob& job) {
                    // A deadline ends as Generate ends (before, OK with "abort").
                    if (!end.ok()) return r->finish(grpc_status(end, r->server_ctx));
                    if (plan->generate) {
                      (*response->mutable_outputs())[plan->output_name] = padded_tensor<int32_t>(
                          generate_answer(*plan, job, end.summary), plan->pad_id);
                    } else {
                      predict_response_proto(predict_outputs(job.results(), plan->logprobs),
                                             request->output_filter(), response);
                    }
                    answered_spec(*plan->model, plan->signature, response->mutable_model_spec(),
                                  plan->name);
                    r->finish(grpc::Status::OK);
                  },
                  [r](const std::exception& e) { r->finish(r->call.error_status(e)); }));
    } catch (const std::exception& e) {
      r->finish(r->call.error_status(e));
    }
  });
  return r;
}

grpc::ServerUnaryReactor* PredictionServiceImpl::GetModelMetadata(
    grpc::CallbackServerContext* context, const tfs::GetModelMetadataRequest* request,
    tfs::GetModelMetadataResponse* response) {
  return answer_now(ctx_, context, kPredictionService, "GetModelMetadata", [&](GrpcCall& call) {
    // As TF Serving: signature_def must be asked for, and is the only metadata there is.
    if (request->metadata_field().empty())
      throw HttpError(400, "GetModelMetadataRequest must specify at least one metadata_field");
    for (const auto& f : request->metadata_field()) {
      if (f != "signature_def")
        throw HttpError(400, fmt::format("Metadata field {} is not supported", f));
    }
    auto model = resolve_spec(ctx_, call, request->model_spec());
    // The REST metadata is the JSON of these messages: parsed, it is the same answer.
    const json meta = model_metadata(*model)["metadata"]["signature_def"];
    tfs::SignatureDefMap defs;
    const auto parsed = google::protobuf::util::JsonStringToMessage(meta.dump(), &defs);
    if (!parsed.ok()) throw Error(ErrorKind::kInternal, std::string(parsed.message()));
    // Predict over gRPC also answers output_lengths (its output_ids are padded).
    tensorflow::SignatureDef& sig = (*defs.mutable_signature_def())[kTokenflowSignature];
    tensorflow::TensorInfo& lengths = (*sig.mutable_outputs())["output_lengths"];
    lengths.set_name("output_lengths:0");
    lengths.set_dtype(tensorflow::DT_INT32);
    lengths.mutable_tensor_shape()->add_dim()->set_size(-1);
    (*response->mutable_metadata())["signature_def"].PackFrom(defs);
    answered_spec(*model, "", response->mutable_model_spec());
  });
}

}  // namespace tf
