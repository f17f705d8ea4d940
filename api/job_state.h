// Job states (mpsd.proto's Job.State): QUEUED → RUNNING → SUCCEEDED | FAILED | CANCELLED, and
// INTERRUPTED for a job that ran when the daemon stopped. What the server, the client and
// follow mode all need to know about them.
#ifndef MPSD_API_JOB_STATE_H_
#define MPSD_API_JOB_STATE_H_

#include "mpsd/v1/mpsd.pb.h"

namespace mpsd::api {

// True for SUCCEEDED, FAILED, CANCELLED and INTERRUPTED: a job in one of these never changes,
// and its event stream ends with the StateChange into it.
bool IsTerminal(mpsd::v1::Job::State state);

}  // namespace mpsd::api

#endif  // MPSD_API_JOB_STATE_H_
