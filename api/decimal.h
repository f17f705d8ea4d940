// The shortest decimal text of a double: shared by the job file writer (client/job_file.h) and
// the sweep expander (server/core/sweep.h), which both print numbers a user reads back.
#ifndef MPSD_API_DECIMAL_H_
#define MPSD_API_DECIMAL_H_

#include <string>

namespace mpsd::api {

// The shortest "%g" text (6 to 17 significant digits) that strtod reads back as exactly
// `value`: 0.001, not 0.0010000000000000000208. For finite values; NaN and infinities come out
// as printf writes them ("nan", "inf"), callers that need another spelling check first.
// Thread-safe; throws nothing.
std::string ShortestDecimal(double value);

}  // namespace mpsd::api

#endif  // MPSD_API_DECIMAL_H_
