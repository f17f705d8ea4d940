// Precompiled header of the mpsd_trainer target: LibTorch's headers dominate its compile time.
// Only stable, heavy, third-party headers belong here.
#include <torch/torch.h>
#include <torch/version.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
