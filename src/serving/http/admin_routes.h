#pragma once
// The server's own routes, whichever protocols it speaks: GET /healthz and /readyz (probes),
// /v1/admin/stats (the engines' counters, memory, connections), /metrics (Prometheus; TF
// Serving's series also at its monitoring path) and POST /v1/admin/reload (a new model config).

#include <cstdint>
#include <functional>
#include <string>

#include "serving/core/serving_state.h"
#include "serving/http/routes.h"

namespace tf {

// What the admin pages read from the transports.
struct AdminSources {
  std::function<int64_t()> open_connections;     // HTTP connections open now
  std::function<int64_t()> slow_reader_streams;  // SSE and gRPC streams ended for slow readers
};

void add_admin_routes(RouteTable& routes, ServingState& state, AdminSources sources);

// The Prometheus page: tokenflow's series (and TF Serving's with tf_serving_names).
std::string render_metrics(const ServingState& state, const AdminSources& sources,
                           bool tf_serving_names);

}  // namespace tf
