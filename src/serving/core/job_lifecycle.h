#pragma once
// One job lifecycle for every door. A planned job (JobPlan: the engine requests, the version that
// runs them, which sequences return, the deadline, the key's admission) is started on its host by
// run_job; when every request has ended, how it ended is decided once (JobEnd: ok, client gone,
// failed, timed out), booked once (record_job: tokens, TTFT, finish, the key's budget), logged
// once (the access log line and the request metrics, with http_status(end)), and handed to the
// protocol's JobSink, which only renders: the outputs as they come (streamed doors) and the end
// (a body, the stream's last events, a gRPC status). gRPC sinks log through their call instead
// (logs_itself), whose status is grpc_status_of(end.error()).

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_request.h"
#include "serving/core/api_common.h"
#include "serving/core/auth.h"
#include "serving/core/generation_job.h"
#include "serving/core/job_host.h"
#include "serving/core/job_summary.h"
#include "serving/models/served_model.h"

namespace tf {

struct ServingState;

// What every planned job carries (GenerationPlan, PredictPlan).
struct JobPlan {
  // The version the job runs on; held until the job ends, so that an unloading version
  // finishes it.
  std::shared_ptr<ServedModel> model;
  std::vector<GenerationRequest> requests;  // one per prompt (moved into the job by run_job)
  ReturnRule rule;                          // which sequences of a prompt are returned
  std::shared_ptr<Admission> admission;     // the API key's admission (nullptr: keys are off)
  std::chrono::milliseconds time_limit{0};  // from arrival to the deadline
};

// How a job ended, decided once: the client left (nothing can be sent), the engine failed on a
// sequence (summary.error), the deadline stopped a sequence, or it finished.
enum class JobOutcome { kOk, kClientGone, kFailed, kTimedOut };
const char* job_outcome_name(JobOutcome outcome);  // "ok", "client_gone", "failed", "timed_out"

struct JobEnd {
  JobOutcome outcome = JobOutcome::kOk;
  JobSummary summary;
  std::chrono::milliseconds time_limit{0};
  // What the client is told when it did not end well: the engine's error (kFailed, with its
  // kind), "the request ran past its deadline (...)" (kDeadlineExceeded), or kCancelled.
  Error error() const;
  bool ok() const { return outcome == JobOutcome::kOk; }
};

// The job's end, from what it produced (summarize_job with the plan's rule and deadline).
JobEnd decide_end(const JobPlan& plan, const GenerationJob& job, const RequestRecord& record,
                  bool client_gone);
// The one mapping to HTTP: 200, 499 (client gone), the failure's status (500, or 400 for a
// request's own constraint past its budget), 504. (gRPC: grpc_status_of(end.error()).)
int http_status(const JobEnd& end);

// What a door renders of a job. Called on the job's host, in order.
class JobSink {
 public:
  virtual ~JobSink() = default;
  // Each output as it is drained (streamed doors render it; the default keeps nothing).
  virtual void output(size_t /*prompt*/, const RequestOutput& /*out*/) {}
  // The end, once, after it was booked (and logged, unless logs_itself). With kClientGone
  // nothing reaches the client; a gRPC sink still finishes its call.
  virtual void end(const JobEnd& end, const GenerationJob& job) = 0;
  // The engine refused a request when the job started (nothing ran): a sink that answers it (a
  // stream whose headers are out) says so, and start_failed renders it after it was logged;
  // otherwise run_job throws it to the caller, which answers it as any error.
  virtual bool answers_start_failure() const { return false; }
  virtual void start_failed(const std::exception& /*e*/) {}
  // gRPC calls log when they finish; HTTP answers are logged by run_job.
  virtual bool logs_itself() const { return false; }
};

// Starts the plan's job on host (its requests moved out of the plan, which the job keeps until
// it ends) and runs it to the sink. Throws what the engine refused at the start unless the sink
// answers it.
void run_job(ServingState& state, std::shared_ptr<JobPlan> plan, std::shared_ptr<JobHost> host,
             std::shared_ptr<RequestRecord> record, std::shared_ptr<JobSink> sink);

}  // namespace tf
