#pragma once
// Where a generation job lives (generation_job.h): an executor that runs the work posted to it
// one piece at a time, in order (an HTTP connection's strand, a gRPC call's strand), and the
// client's departure, which cancels the job.

#include <functional>

namespace tf {

class JobHost {
 public:
  virtual ~JobHost() = default;
  // Runs fn later, serialized with everything else posted here.
  virtual void post(std::function<void()> fn) = 0;
  // Called once, as posted work, if the client goes away before the answer ended.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

}  // namespace tf
