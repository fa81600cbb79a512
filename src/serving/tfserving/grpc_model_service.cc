#include "serving/tfserving/grpc_model_service.h"

#include <fmt/format.h>

#include "serving/tfserving/tfserving_api.h"
#include "tensorflow_serving/apis/model_service.pb.h"

namespace tf {
namespace {

constexpr const char* kModelService = "tensorflow.serving.ModelService";

// TF Serving's error code of a status message (tensorflow.error.Code has gRPC's numbers).
void set_status(tfs::StatusProto* out, const grpc::Status& status) {
  out->set_error_code(static_cast<tensorflow::error::Code>(status.error_code()));
  out->set_error_message(status.error_message());
}

}  // namespace

ModelServiceImpl::ModelServiceImpl(GrpcContext& ctx) : ctx_(ctx) {
  // model_service.pb.cc holds only the service's descriptor, which no code references: a
  // reference keeps the linker from dropping it, so that reflection can describe ModelService.
  [[maybe_unused]] static const void* volatile model_service_file =
      &descriptor_table_tensorflow_5fserving_2fapis_2fmodel_5fservice_2eproto;
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModelStatus(
    grpc::CallbackServerContext* context, const tfs::GetModelStatusRequest* request,
    tfs::GetModelStatusResponse* response) {
  return answer_now(ctx_, context, kModelService, "GetModelStatus", [&](GrpcCall& call) {
    const ModelRequestSpec spec = model_spec_of(request->model_spec());
    ctx_.state.require_model_access(*call.record, spec.name);
    call.record->model = spec.name;
    call.record->model_unknown = !ctx_.state.registry.status(spec.name).has_value();
    for (const VersionStatus& v :
         model_version_statuses(ctx_.state, spec.name, spec.version, spec.label)) {
      tfs::ModelVersionStatus* out = response->add_model_version_status();
      out->set_version(v.version);
      out->set_state(static_cast<tfs::ModelVersionStatus::State>(static_cast<int>(v.state)));
      // A version that failed carries its reason, as TF Serving reports a load error.
      set_status(out->mutable_status(), v.error.empty()
                                            ? grpc::Status::OK
                                            : grpc::Status(grpc::StatusCode::UNKNOWN, v.error));
    }
  });
}

grpc::ServerUnaryReactor* ModelServiceImpl::HandleReloadConfigRequest(
    grpc::CallbackServerContext* context, const tfs::ReloadConfigRequest* request,
    tfs::ReloadConfigResponse* response) {
  GrpcCallbackScope scope;
  auto* reactor = context->DefaultReactor();
  auto call = std::make_shared<GrpcCall>(ctx_, context, kModelService, "HandleReloadConfigRequest",
                                         "unary");
  auto finish = [call, reactor, response](const grpc::Status& status) {
    set_status(response->mutable_status(), status);
    call->finish(status);
    grpc_handoff_release();
    reactor->Finish(status);
  };
  try {
    call->admit();
    ctx_.state.require_admin(*call->record);
    if (!ctx_.state.reload)
      throw HttpError(400, "this server takes no reloads", "reload_unsupported");
    // A request without a config re-reads --model_config_file (as an empty POST
    // /v1/admin/reload does); a config is validated before anything changes.
    std::optional<tfs::ModelServerConfig> config;
    if (request->has_config()) {
      try {
        validate_model_server_config(request->config());
      } catch (const Error& e) {
        throw HttpError(400, e.what(), "invalid_config");
      }
      ctx_.state.check_reload_config(request->config());
      config = request->config();
    }
    // Answered from the version manager's thread once the new state is loaded (or refused).
    ctx_.state.reload(std::move(config), [finish](const std::string& error) {
      finish(error.empty() ? grpc::Status::OK
                           : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error));
    });
  } catch (const std::exception& e) {
    finish(call->error_status(e));
  }
  return reactor;
}

}  // namespace tf
