#include "api/decimal.h"

#include <cstdio>
#include <cstdlib>

namespace mpsd::api {

std::string ShortestDecimal(double value) {
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace mpsd::api
