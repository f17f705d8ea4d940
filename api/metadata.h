// gRPC metadata keys the daemon sets beyond the proto's messages, for the server and the client.
#ifndef MPSD_API_METADATA_H_
#define MPSD_API_METADATA_H_

namespace mpsd::api {

// Trailing metadata of ListJobs: the ids of jobs whose rows in the daemon's database cannot be
// read (a damaged page; GetJob answers DATA_LOSS for each), comma-separated, highest first. Sent
// with every page while there are any: the page lists what is readable, and a client says
// that some jobs are missing from it rather than showing a partial list as the whole.
inline constexpr char kDamagedJobIdsMetadata[] = "mpsd-damaged-job-ids";

}  // namespace mpsd::api

#endif  // MPSD_API_METADATA_H_
