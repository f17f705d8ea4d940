// Memory figures: the resident-set reader.
#include "api/memory.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace mpsd::api {

int64_t ResidentSetBytes(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/statm";
  std::FILE* statm = std::fopen(path.c_str(), "r");
  if (statm == nullptr) return 0;
  long long size_pages = 0, resident_pages = 0;
  const int fields = std::fscanf(statm, "%lld %lld", &size_pages, &resident_pages);
  std::fclose(statm);
  if (fields != 2) return 0;
  return static_cast<int64_t>(resident_pages) * sysconf(_SC_PAGESIZE);
}

}  // namespace mpsd::api
