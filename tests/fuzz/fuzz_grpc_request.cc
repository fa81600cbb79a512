// Fuzz target: the gRPC API's request messages. Any bytes parsed as a GenerateRequest go through
// the typed request's reader and the planner behind it (sampling parameters,
// prompts, chat messages through a chat template); as a ReloadConfigRequest, through the model
// config's validation. Any input must end in a value or an Error, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "core/error.h"
#include "openai_body_check.h"
#include "serving/grpc/grpc_generation.h"
#include "serving/models/server_config.h"
#include "tensorflow_serving/apis/model_management.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Invalid UTF-8 in string fields is refused by the parser, with a log line per input.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  tokenflow::v1::GenerateRequest req;
  if (req.ParseFromArray(data, static_cast<int>(size))) {
    for (bool stream : {false, true}) {
      try {
        check_request(tf::read_generate_request(req, stream));
      } catch (const tf::Error&) {
      }
    }
  }
  tensorflow::serving::ReloadConfigRequest reload;
  if (reload.ParseFromArray(data, static_cast<int>(size))) {
    try {
      tf::validate_model_server_config(reload.config());
      (void)tf::model_entries(reload.config());
    } catch (const tf::Error&) {
    }
  }
  return 0;
}
