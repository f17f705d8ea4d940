// Job states.
#include "api/job_state.h"

namespace mpsd::api {

bool IsTerminal(mpsd::v1::Job::State state) {
  using mpsd::v1::Job;
  return state == Job::SUCCEEDED || state == Job::FAILED || state == Job::CANCELLED ||
         state == Job::INTERRUPTED;
}

}  // namespace mpsd::api
