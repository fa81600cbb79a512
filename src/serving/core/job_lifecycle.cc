#include "serving/core/job_lifecycle.h"

#include "serving/core/serving_state.h"

namespace tf {

const char* job_outcome_name(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::kOk:
      return "ok";
    case JobOutcome::kClientGone:
      return "client_gone";
    case JobOutcome::kFailed:
      return "failed";
    case JobOutcome::kTimedOut:
      return "timed_out";
  }
  return "ok";
}

Error JobEnd::error() const {
  switch (outcome) {
    case JobOutcome::kFailed:
      return summary.failure();
    case JobOutcome::kTimedOut:
      return Error(ErrorKind::kDeadlineExceeded, deadline_message(time_limit));
    case JobOutcome::kClientGone:
      return Error(ErrorKind::kCancelled, "the client went away");
    case JobOutcome::kOk:
      break;
  }
  return Error(ErrorKind::kInternal, "the job ended well");
}

JobEnd decide_end(const JobPlan& plan, const GenerationJob& job, const RequestRecord& record,
                  bool client_gone) {
  JobEnd end;
  end.time_limit = plan.time_limit;
  end.summary = summarize_job(job, plan.rule, record.received, record.received + plan.time_limit);
  if (client_gone) {
    end.outcome = JobOutcome::kClientGone;
  } else if (!end.summary.error.empty()) {
    end.outcome = JobOutcome::kFailed;
  } else if (end.summary.timed_out) {
    end.outcome = JobOutcome::kTimedOut;
  }
  return end;
}

int http_status(const JobEnd& end) {
  switch (end.outcome) {
    case JobOutcome::kOk:
      return 200;
    case JobOutcome::kClientGone:
      return 499;
    case JobOutcome::kFailed:
      return end.summary.error_status();
    case JobOutcome::kTimedOut:
      return 504;
  }
  return 500;
}

void run_job(ServingState& state, std::shared_ptr<JobPlan> plan, std::shared_ptr<JobHost> host,
             std::shared_ptr<RequestRecord> record, std::shared_ptr<JobSink> sink) {
  const ServedModel& m = *plan->model;
  JobObserver observer{&state.metrics, {{"model", m.name}, {"version", std::to_string(m.version)}}};
  GenerationJob::EventFn on_event = [sink](size_t i, const RequestOutput& out) {
    sink->output(i, out);
  };
  GenerationJob::DoneFn on_done = [plan, record, sink](const GenerationJob& job, bool client_gone) {
    const JobEnd end = decide_end(*plan, job, *record, client_gone);
    record_job(end.summary, *record, plan->admission.get());
    // Logged (and counted) before the answer goes out: a client that has its answer may
    // already read the metrics.
    if (!sink->logs_itself()) log_request(*record, http_status(end));
    sink->end(end, job);
  };
  Engine& engine = *m.engine;
  try {
    GenerationJob::start(engine, std::move(plan->requests), std::move(host), state.jobs,
                         std::move(on_event), std::move(on_done), std::move(observer));
  } catch (const std::exception& e) {
    if (!sink->answers_start_failure()) throw;
    if (!sink->logs_itself()) log_request(*record, http_status_of(e));
    sink->start_failed(e);
  }
}

}  // namespace tf
