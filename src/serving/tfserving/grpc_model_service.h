#pragma once
// TF Serving's tensorflow.serving.ModelService (proto/tensorflow_serving/apis/model_service.proto)
// over the model registry: GetModelStatus with TF Serving's states and messages, and
// HandleReloadConfigRequest taking the ModelServerConfig of --model_config_file. Same answers as
// the REST status route and POST /v1/admin/reload.

#include "serving/grpc/grpc_call.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"

namespace tf {

class ModelServiceImpl final : public tfs::ModelService::CallbackService {
 public:
  explicit ModelServiceImpl(GrpcContext& ctx);

  grpc::ServerUnaryReactor* GetModelStatus(grpc::CallbackServerContext* context,
                                           const tfs::GetModelStatusRequest* request,
                                           tfs::GetModelStatusResponse* response) override;
  grpc::ServerUnaryReactor* HandleReloadConfigRequest(grpc::CallbackServerContext* context,
                                                      const tfs::ReloadConfigRequest* request,
                                                      tfs::ReloadConfigResponse* response) override;

 private:
  GrpcContext& ctx_;
};

}  // namespace tf
