// Decoding one JPEG or PNG file into fixed-size uint8 pixels [C, H, W], as torchvision's
// ImageFolder with transforms.Resize((H, W)) would see it through PIL: libjpeg-turbo
// (TurboJPEG API) and libpng (its simplified API) decode, Pillow's resampling resizes. Torch-free
// (so it compiles fast and can be fuzzed on its own); internal to trainer/.
#ifndef MPSD_TRAINER_IMAGE_DECODE_H_
#define MPSD_TRAINER_IMAGE_DECODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mpsd::trainer {

// Decoded pixels, interleaved RGB (3 bytes per pixel, row-major, no padding).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height × width × 3
};

// Decodes a whole JPEG (by its SOI marker FF D8) or PNG (by its 8-byte signature) file held in
// `bytes` to 8-bit RGB, whatever its name says. Grayscale files are replicated into the three
// channels, palettes expanded, 16-bit samples reduced to 8 bits, alpha dropped (as PIL's
// convert("RGB") does: no compositing). Warnings from libjpeg (a truncated or corrupt stream
// that it would otherwise fill with gray) are errors. Errors are DATA_LOSS with the library's
// message ("not a JPEG or PNG file", "Premature end of JPEG file", "PNG: IDAT: CRC error",
// "image of 20000×20000 pixels is larger than the 268435456 pixels allowed"); the caller adds
// the file name. Thread-safe (each call has its own decoder state).
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes);

// Resizes `image` to `height` × `width` and writes it planar into `out` ([channels, height,
// width] uint8, channels 3 = R, G, B or 1 = luma). Resampling is Pillow's ImagingResample with
// the BILINEAR filter (Pillow src/libImaging/Resample.c: a triangle filter of support 1 scaled
// by the downscaling factor, so downscaling averages every source pixel under it, i.e.
// torchvision Resize(antialias=True) on a PIL image): horizontal pass, then vertical, in the
// same fixed-point arithmetic (22 fraction bits, rounded, clipped to uint8 after each pass).
// Luma is PIL's convert("L") of the resized RGB: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16
// (ITU-R 601-2; Pillow src/libImaging/Convert.c). `out` must hold channels × height × width
// bytes. Thread-safe.
void ResizeInto(const RgbImage& image, int height, int width, int channels, uint8_t* out);

// Reads the file at `path` whole and decodes it (DecodeImage). Errors name the file:
// "<path>: cannot read: Permission denied" (FAILED_PRECONDITION whatever the errno: a job
// fails with DATASET_ERROR), "<path>: not a regular file" (FAILED_PRECONDITION; opened without
// blocking, so a FIFO is refused, not waited for), "<path>: not a JPEG or PNG file" (DATA_LOSS),
// or DecodeImage's message after the path.
absl::StatusOr<RgbImage> ReadImageFile(const std::string& path);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_IMAGE_DECODE_H_
