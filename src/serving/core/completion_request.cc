#include "serving/core/completion_request.h"

#include <algorithm>

#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"

namespace tf {

void apply_request_rules(CompletionRequest& r, bool use_beam_search) {
  SamplingParams& p = r.params;
  if (use_beam_search) {
    // vLLM's beam search: best_of (or n) beams, the n best returned.
    p.num_beams = std::max(p.best_of.value_or(p.n), 2);
    p.num_return_sequences = p.n;
    p.best_of.reset();
  }
  if (r.stream && p.best_of && *p.best_of > p.n) {
    throw HttpError(400, "'best_of' greater than 'n' cannot stream: the best are known at the end",
                    "", "best_of");
  }
  if (r.prompt_logprobs && r.stream)
    throw HttpError(400, "'prompt_logprobs' cannot stream (they come with the whole response)", "",
                    "prompt_logprobs");
  if (p.beam_search() && (r.prompt_logprobs || (r.echo && p.logprobs)))
    throw HttpError(400, "prompt logprobs with beam search are not supported", "",
                    r.prompt_logprobs ? "prompt_logprobs" : "echo");
  check_stop_limits(p);
}

}  // namespace tf
