// JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng's simplified API) decoding, and Pillow's
// bilinear resampling into planar uint8.
#include "trainer/image_decode.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/input_limits.h"
#include "trainer/scoped_fd.h"

namespace mpsd::trainer {
namespace {

bool IsJpeg(absl::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF &&
         static_cast<uint8_t>(bytes[1]) == 0xD8 && static_cast<uint8_t>(bytes[2]) == 0xFF;
}

bool IsPng(absl::string_view bytes) {
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kSignature, 8) == 0;
}

absl::Status CheckPixels(int64_t width, int64_t height) {
  if (width <= 0 || height <= 0) {
    return absl::DataLossError(
        absl::StrFormat("image of %d×%d pixels (a truncated or corrupt header)", width, height));
  }
  // Refused before any pixel memory is allocated: a 40-byte PNG can claim 2^31 × 2^31 pixels.
  const int64_t limit = CurrentInputLimits().max_image_pixels;
  if (width * height > limit) {
    return absl::DataLossError(absl::StrFormat(
        "image of %d×%d pixels is larger than the %d pixels allowed (executor.max_image_pixels)",
        width, height, limit));
  }
  return absl::OkStatus();
}

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes) {
  const std::unique_ptr<void, TjDeleter> handle(tjInitDecompress());
  if (handle == nullptr) return absl::InternalError("tjInitDecompress failed");
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());  // NOLINT(runtime/int): its API
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle.get(), data, size, &width, &height, &subsampling, &colorspace) !=
      0) {
    return absl::DataLossError(absl::StrCat("JPEG: ", tjGetErrorStr2(handle.get())));
  }
  if (absl::Status s = CheckPixels(width, height); !s.ok()) return s;
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  // STOPONWARNING: a truncated stream is an error, not an image half filled with gray.
  // LIMITSCANS: a progressive file with thousands of scans (a known CPU bomb) is refused.
  if (tjDecompress2(handle.get(), data, size, image.pixels.data(), width, /*pitch=*/0, height,
                    TJPF_RGB, TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
    return absl::DataLossError(absl::StrCat("JPEG: ", tjGetErrorStr2(handle.get())));
  }
  return image;
}

absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  // Frees libpng's state on every path (a no-op once png_image_finish_read freed it).
  const std::unique_ptr<png_image, void (*)(png_imagep)> cleanup(&png, png_image_free);
  if (png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()) == 0) {
    return absl::DataLossError(absl::StrCat("PNG: ", png.message));
  }
  if (absl::Status s = CheckPixels(png.width, png.height); !s.ok()) return s;
  png.format = PNG_FORMAT_RGBA;  // alpha read, then dropped below (no compositing)
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, /*background=*/nullptr, rgba.data(), /*row_stride=*/0,
                            /*colormap=*/nullptr) == 0) {
    return absl::DataLossError(absl::StrCat("PNG: ", png.message));
  }
  RgbImage image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  const size_t count = static_cast<size_t>(image.width) * image.height;
  image.pixels.resize(count * 3);
  for (size_t i = 0; i < count; ++i) std::memcpy(&image.pixels[i * 3], &rgba[i * 4], 3);
  return image;
}

// ---- Pillow's resampling (src/libImaging/Resample.c) ------------------------------------------

constexpr int kPrecisionBits = 32 - 8 - 2;

double BilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Per output pixel: the first source pixel and how many contribute, and their fixed-point
// weights (Pillow's precompute_coeffs + normalize_coeffs_8bpc).
struct Coefficients {
  int kernel_size = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // out_size × kernel_size
};

Coefficients Precompute(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the bilinear filter's support is 1
  Coefficients c;
  c.kernel_size = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(static_cast<size_t>(out_size) * c.kernel_size, 0);
  std::vector<double> k(c.kernel_size);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double total = 0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = BilinearFilter((x + xmin - center + 0.5) * ss);
      total += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = total != 0.0 ? k[x] / total : k[x];
      c.weights[static_cast<size_t>(xx) * c.kernel_size + x] = static_cast<int32_t>(
          w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

uint8_t Clip8(int64_t value) {
  const int64_t shifted = value >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(shifted, 0, 255));
}

// One pass along rows (horizontal) of an interleaved 3-channel image.
std::vector<uint8_t> ResampleHorizontal(const std::vector<uint8_t>& in, int in_width, int height,
                                        int out_width) {
  const Coefficients c = Precompute(in_width, out_width);
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * height * 3);
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = &in[static_cast<size_t>(y) * in_width * 3];
    uint8_t* dst = &out[static_cast<size_t>(y) * out_width * 3];
    for (int xx = 0; xx < out_width; ++xx) {
      const int32_t* k = &c.weights[static_cast<size_t>(xx) * c.kernel_size];
      for (int ch = 0; ch < 3; ++ch) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (int x = 0; x < c.count[xx]; ++x)
          sum += row[(c.first[xx] + x) * 3 + ch] * int64_t{k[x]};
        dst[xx * 3 + ch] = Clip8(sum);
      }
    }
  }
  return out;
}

// One pass along columns (vertical) of an interleaved 3-channel image.
std::vector<uint8_t> ResampleVertical(const std::vector<uint8_t>& in, int width, int in_height,
                                      int out_height) {
  const Coefficients c = Precompute(in_height, out_height);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  std::vector<uint8_t> out(row_bytes * out_height);
  for (int yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &c.weights[static_cast<size_t>(yy) * c.kernel_size];
    uint8_t* dst = &out[row_bytes * yy];
    for (size_t i = 0; i < row_bytes; ++i) {
      int64_t sum = int64_t{1} << (kPrecisionBits - 1);
      for (int y = 0; y < c.count[yy]; ++y) {
        sum += in[row_bytes * (c.first[yy] + y) + i] * int64_t{k[y]};
      }
      dst[i] = Clip8(sum);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes) {
  if (IsJpeg(bytes)) return DecodeJpeg(bytes);
  if (IsPng(bytes)) return DecodePng(bytes);
  return absl::DataLossError(bytes.empty() ? "empty file" : "not a JPEG or PNG file");
}

void ResizeInto(const RgbImage& image, int height, int width, int channels, uint8_t* out) {
  // Pillow skips a pass whose size does not change.
  std::vector<uint8_t> pixels = image.pixels;
  if (width != image.width) pixels = ResampleHorizontal(pixels, image.width, image.height, width);
  if (height != image.height) pixels = ResampleVertical(pixels, width, image.height, height);
  const size_t plane = static_cast<size_t>(height) * width;
  for (size_t i = 0; i < plane; ++i) {
    const uint8_t r = pixels[i * 3], g = pixels[i * 3 + 1], b = pixels[i * 3 + 2];
    if (channels == 1) {
      out[i] = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
    } else {
      out[i] = r;
      out[plane + i] = g;
      out[2 * plane + i] = b;
    }
  }
}

absl::StatusOr<RgbImage> ReadImageFile(const std::string& path) {
  // O_NONBLOCK: a FIFO put in the file's place after the scan must not block the open (waiting
  // for a writer); it is refused below. Reads of a regular file ignore the flag.
  const ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    // FAILED_PRECONDITION whatever errno says (permission denied included): a dataset file the
    // job cannot read is the dataset's problem (DATASET_ERROR), not mpsd's.
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot read: ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": stat"));
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat(path, ": cannot read"));
    if (n == 0) return absl::DataLossError(absl::StrCat(path, ": got shorter while read"));
    done += static_cast<size_t>(n);
  }
  absl::StatusOr<RgbImage> image = DecodeImage(bytes);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

}  // namespace mpsd::trainer
