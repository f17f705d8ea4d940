// Augmentation as whole-batch kernels (augment.h). Per-example random parameters are drawn as
// [N] (or [N, tries]) tensors on the images' device; each transform then runs once over the
// batch: crops and resizes as one grid_sample with a per-example grid, boxes as masks built from
// row and column ranges, a per-example choice as `where`. Nothing reads a value back to the host.
#include "trainer/augment.h"

#include <cmath>

namespace mpsd::trainer {
namespace {

constexpr int kTries = 10;  // RandomResizedCrop's and RandomErasing's attempts
constexpr double kPi = 3.14159265358979323846;

torch::TensorOptions IndexOptions(const torch::Tensor& like) {
  return torch::TensorOptions().dtype(torch::kInt64).device(like.device());
}
torch::TensorOptions FloatOptions(const torch::Tensor& like) {
  return torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
}

// Uniform in [low, high), shape `sizes`, float32 on `like`'s device.
torch::Tensor Uniform(at::IntArrayRef sizes, double low, double high, const torch::Tensor& like,
                      at::Generator& generator) {
  return torch::rand(sizes, generator, FloatOptions(like)) * (high - low) + low;
}

// A per-channel [C] vector (or one value for all) as [1, C, 1, 1] in the images' dtype/device.
torch::Tensor ChannelVector(const torch::Tensor& values, const torch::Tensor& images,
                            const char* what) {
  const int64_t c = images.size(1);
  TORCH_CHECK(values.dim() == 1 && (values.size(0) == c || values.size(0) == 1), "Augment: ", what,
              " is ", values.sizes(), ", expected [", c, "] or [1]");
  return values.to(images.options()).view({1, -1, 1, 1});
}

// Python's round() of non-negative values: half to even (torch.round rounds so too).
torch::Tensor RoundHalfEven(const torch::Tensor& x) { return torch::round(x); }

// [N, tries] candidates → the first valid one per example, and whether there was one.
std::pair<torch::Tensor, torch::Tensor> FirstValid(const torch::Tensor& valid) {
  const torch::Tensor first = valid.to(torch::kInt32).argmax(/*dim=*/1, /*keepdim=*/true);
  return {first, valid.any(/*dim=*/1)};
}

torch::Tensor Pick(const torch::Tensor& candidates, const torch::Tensor& first) {
  return candidates.gather(/*dim=*/1, first).squeeze(1);
}

// floor(u × bound) with u uniform in [0, 1): randint(0, bound) for a per-example bound >= 1.
torch::Tensor RandIntBelow(const torch::Tensor& bound, at::Generator& generator) {
  const torch::Tensor u = torch::rand({bound.size(0)}, generator, FloatOptions(bound));
  return torch::minimum((u * bound.to(torch::kFloat32)).floor().to(torch::kInt64), bound - 1);
}

torch::Tensor RandomCrop(const torch::Tensor& images, int64_t padding, const torch::Tensor& fill,
                         at::Generator& generator) {
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const int64_t padded_w = w + 2 * padding;
  torch::Tensor padded = torch::empty({n, c, h + 2 * padding, padded_w}, images.options());
  if (!fill.defined()) {
    padded.zero_();
  } else {
    TORCH_CHECK(fill.dim() == 1 && fill.size(0) == c, "Augment: padding_fill is ", fill.sizes(),
                ", expected [", c, "]");
    // A no-op when the fill is already on the images' device in their dtype.
    const torch::Tensor values = fill.to(images.options());
    padded.copy_(values.view({1, c, 1, 1}).expand_as(padded));
  }
  padded.narrow(/*dim=*/2, padding, h).narrow(/*dim=*/3, padding, w).copy_(images);

  // Offsets in [0, 2p], as RandomCrop's randint(0, h + 2p - h + 1).
  const auto index_options = IndexOptions(images);
  const torch::Tensor dy = torch::randint(2 * padding + 1, {n}, generator, index_options);
  const torch::Tensor dx = torch::randint(2 * padding + 1, {n}, generator, index_options);
  const torch::Tensor rows = dy.view({n, 1}) + torch::arange(h, index_options);  // [N, H]
  const torch::Tensor cols = dx.view({n, 1}) + torch::arange(w, index_options);  // [N, W]
  const torch::Tensor band =
      padded.gather(/*dim=*/2, rows.view({n, 1, h, 1}).expand({n, c, h, padded_w}));
  return band.gather(/*dim=*/3, cols.view({n, 1, 1, w}).expand({n, c, h, w}));
}

torch::Tensor RandomHorizontalFlip(const torch::Tensor& images, at::Generator& generator) {
  const int64_t n = images.size(0);
  const torch::Tensor flip =
      torch::rand({n}, generator, torch::TensorOptions().device(images.device())).lt(0.5);
  return torch::where(flip.view({n, 1, 1, 1}), images.flip({/*dim=*/3}), images);
}

torch::Tensor RandomResizedCrop(const torch::Tensor& images, const RandomResizedCropOptions& o,
                                at::Generator& generator) {
  const augment_kernels::Boxes box = augment_kernels::DrawResizedCropBoxes(
      images.size(0), images.size(2), images.size(3), o, images.device(), generator);
  return augment_kernels::ResizedCrop(images, box.top, box.left, box.height, box.width, o.height,
                                      o.width);
}

torch::Tensor RandomRotation(const torch::Tensor& images, const AugmentationOptions& options,
                             at::Generator& generator) {
  const torch::Tensor degrees =
      Uniform({images.size(0)}, options.rotation_min, options.rotation_max, images, generator);
  return augment_kernels::Rotate(images, degrees, options.padding_fill);
}

torch::Tensor Ratio(const torch::Tensor& factor) { return factor.view({-1, 1, 1, 1}); }

// functional_tensor._blend: (r img1 + (1 - r) img2).clamp(0, 1).
torch::Tensor Blend(const torch::Tensor& img1, const torch::Tensor& img2,
                    const torch::Tensor& factor) {
  const torch::Tensor r = Ratio(factor).to(img1.scalar_type());
  return (r * img1 + (1 - r) * img2).clamp(0, 1);
}

// functional_tensor.rgb_to_grayscale: 0.2989 r + 0.587 g + 0.114 b, [N, 1, H, W].
torch::Tensor Grayscale(const torch::Tensor& rgb) {
  const torch::Tensor r = rgb.select(1, 0), g = rgb.select(1, 1), b = rgb.select(1, 2);
  return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(1);
}

// ColorJitter: factors per example, the four adjustments in a random order per example (a
// random permutation of 4 per example, as argsort of uniform draws). Round r applies, to each
// example, the adjustment its permutation names at r: one blend and (with hue) one hue pass
// run over the whole batch and `where` keeps them for the examples that take them this round.
torch::Tensor ColorJitter(const torch::Tensor& images, const AugmentationOptions& options,
                          at::Generator& generator) {
  namespace k = augment_kernels;
  const ColorJitterOptions& o = options.color_jitter;
  const int64_t n = images.size(0);
  torch::Tensor pixels = images;
  torch::Tensor mean, std;
  if (options.pixel_mean.defined()) {
    mean = ChannelVector(options.pixel_mean, images, "pixel_mean");
    std = ChannelVector(options.pixel_std, images, "pixel_std");
    pixels = images * std + mean;
  }
  const auto factor = [&](double v) {
    return Uniform({n}, std::max(0.0, 1.0 - v), 1.0 + v, images, generator);
  };
  const torch::Tensor brightness = o.brightness > 0 ? factor(o.brightness) : torch::Tensor();
  const torch::Tensor contrast = o.contrast > 0 ? factor(o.contrast) : torch::Tensor();
  const torch::Tensor saturation = o.saturation > 0 ? factor(o.saturation) : torch::Tensor();
  const torch::Tensor hue =
      o.hue > 0 ? Uniform({n}, -o.hue, o.hue, images, generator) : torch::Tensor();
  const torch::Tensor order =
      torch::rand({n, 4}, generator, FloatOptions(images)).argsort(/*dim=*/int64_t{1});
  // Brightness, contrast and saturation are all functional_tensor._blend(img, other, factor)
  // with another `other` (0, the grayscale's mean, the grayscale): per round one blend over the
  // batch with each example's own `other` and factor, kept where the example's adjustment in
  // this round is one of them. Hue, through HSV, is its own pass.
  const bool rgb = images.size(1) == 3;
  const bool blends = brightness.defined() || contrast.defined() || (saturation.defined() && rgb);
  const torch::Tensor zero = torch::zeros({1, 1, 1, 1}, pixels.options());
  for (int64_t round = 0; round < 4; ++round) {
    const torch::Tensor op = order.select(/*dim=*/1, round);  // [N]
    if (blends) {
      torch::Tensor factor = torch::ones({n}, FloatOptions(images));
      torch::Tensor applies = torch::zeros({n}, op.options().dtype(torch::kBool));
      torch::Tensor other = zero;
      const torch::Tensor gray =
          (contrast.defined() || saturation.defined()) && rgb ? Grayscale(pixels) : pixels;
      if (brightness.defined()) {
        factor = torch::where(op.eq(0), brightness, factor);
        applies = applies | op.eq(0);
      }
      if (contrast.defined()) {
        factor = torch::where(op.eq(1), contrast, factor);
        applies = applies | op.eq(1);
        other = torch::where(op.eq(1).view({n, 1, 1, 1}), gray.mean({1, 2, 3}, /*keepdim=*/true),
                             other);
      }
      if (saturation.defined() && rgb) {
        factor = torch::where(op.eq(2), saturation, factor);
        applies = applies | op.eq(2);
        other = torch::where(op.eq(2).view({n, 1, 1, 1}), gray, other);
      }
      pixels = torch::where(applies.view({n, 1, 1, 1}), Blend(pixels, other, factor), pixels);
    }
    if (hue.defined()) {
      pixels = torch::where(op.eq(3).view({n, 1, 1, 1}), k::AdjustHue(pixels, hue), pixels);
    }
  }
  return mean.defined() ? (pixels - mean) / std : pixels;
}

torch::Tensor RandomErasing(const torch::Tensor& images, const RandomErasingOptions& o,
                            at::Generator& generator) {
  const augment_kernels::Boxes box = augment_kernels::DrawErasingBoxes(
      images.size(0), images.size(2), images.size(3), o, images.device(), generator);
  const torch::Tensor value = o.value.defined() ? o.value : torch::zeros({1}, FloatOptions(images));
  return augment_kernels::Erase(images, box.top, box.left, box.height, box.width, value);
}

// λ ~ Beta(alpha, alpha) as [1] on the device: Γ(α) / (Γ(α) + Γ(α)), as torch._sample_dirichlet.
torch::Tensor SampleBeta(double alpha, const torch::Tensor& like, at::Generator& generator) {
  const torch::Tensor gamma =
      at::_standard_gamma(torch::full({2}, alpha, FloatOptions(like)), generator);
  // Both draws 0 (possible in float32 for a small alpha): 0/0, taken as 0.5.
  return torch::nan_to_num(gamma.narrow(/*dim=*/0, 0, 1) / gamma.sum(), /*nan=*/0.5);
}

}  // namespace

std::pair<int64_t, int64_t> ResolvedResize(const std::vector<int64_t>& size, int64_t height,
                                           int64_t width) {
  if (size.size() >= 2) return {size[0], size[1]};
  if (size.empty()) return {height, width};
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  const int64_t new_short = size[0];
  const auto new_long =
      static_cast<int64_t>(static_cast<double>(new_short * longer) / static_cast<double>(shorter));
  return width <= height ? std::pair{new_long, new_short} : std::pair{new_short, new_long};
}

void SetNormalisation(const std::vector<float>& mean, const std::vector<float>& std,
                      int64_t channels, AugmentationOptions& options) {
  if (mean.empty() || std.empty()) return;
  std::vector<float> fill, means, stds;
  for (int64_t c = 0; c < channels; ++c) {
    const size_t i = mean.size() == 1 ? 0 : static_cast<size_t>(c);
    const size_t j = std.size() == 1 ? 0 : static_cast<size_t>(c);
    fill.push_back(-mean[i] / std[j]);
    means.push_back(mean[i]);
    stds.push_back(std[j]);
  }
  options.padding_fill = torch::tensor(fill, torch::kFloat32);
  options.pixel_mean = torch::tensor(means, torch::kFloat32);
  options.pixel_std = torch::tensor(stds, torch::kFloat32);
}

void MoveToDevice(const torch::Device& device, AugmentationOptions& options) {
  for (torch::Tensor* t : {&options.padding_fill, &options.pixel_mean, &options.pixel_std,
                           &options.random_erasing.value}) {
    if (t->defined()) *t = t->to(device);
  }
}

namespace augment_kernels {

// RandomResizedCrop.get_params per example: 10 tries of (area, log-ratio) drawn as [N, 10],
// the first that fits taken; the fallback is host arithmetic on the sizes.
Boxes DrawResizedCropBoxes(int64_t n, int64_t height, int64_t width,
                           const RandomResizedCropOptions& o, const torch::Device& device,
                           at::Generator& generator) {
  const torch::Tensor like = torch::empty({0}, torch::TensorOptions().device(device));
  const double area = static_cast<double>(height * width);
  const torch::Tensor target_area =
      Uniform({n, kTries}, o.scale_min, o.scale_max, like, generator) * area;
  const torch::Tensor aspect =
      Uniform({n, kTries}, std::log(o.ratio_min), std::log(o.ratio_max), like, generator).exp();
  const torch::Tensor w = RoundHalfEven((target_area * aspect).sqrt()).to(torch::kInt64);
  const torch::Tensor h = RoundHalfEven((target_area / aspect).sqrt()).to(torch::kInt64);
  const torch::Tensor valid = w.gt(0) & w.le(width) & h.gt(0) & h.le(height);
  const auto [first, found] = FirstValid(valid);
  // The fallback: the whole image clipped to the ratio range, centred.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t fallback_w = width, fallback_h = height;
  if (in_ratio < o.ratio_min) {
    fallback_h = static_cast<int64_t>(std::nearbyint(static_cast<double>(width) / o.ratio_min));
  } else if (in_ratio > o.ratio_max) {
    fallback_w = static_cast<int64_t>(std::nearbyint(static_cast<double>(height) * o.ratio_max));
  }
  Boxes box;
  box.height = torch::where(found, Pick(h, first), fallback_h);
  box.width = torch::where(found, Pick(w, first), fallback_w);
  box.top = torch::where(found, RandIntBelow(height - box.height + 1, generator),
                         (height - fallback_h) / 2);
  box.left =
      torch::where(found, RandIntBelow(width - box.width + 1, generator), (width - fallback_w) / 2);
  return box;
}

// RandomErasing.get_params per example, and its coin: h from area × ratio, w from area / ratio
// (RandomResizedCrop's the other way round); a try counts when h < H and w < W; no fit or no
// erasing = a box of height and width 0.
Boxes DrawErasingBoxes(int64_t n, int64_t height, int64_t width, const RandomErasingOptions& o,
                       const torch::Device& device, at::Generator& generator) {
  const torch::Tensor like = torch::empty({0}, torch::TensorOptions().device(device));
  const double area = static_cast<double>(height * width);
  const torch::Tensor erase_area =
      Uniform({n, kTries}, o.scale_min, o.scale_max, like, generator) * area;
  const torch::Tensor aspect =
      Uniform({n, kTries}, std::log(o.ratio_min), std::log(o.ratio_max), like, generator).exp();
  const torch::Tensor h = RoundHalfEven((erase_area * aspect).sqrt()).to(torch::kInt64);
  const torch::Tensor w = RoundHalfEven((erase_area / aspect).sqrt()).to(torch::kInt64);
  const auto [first, found] = FirstValid(h.lt(height) & w.lt(width));
  const torch::Tensor apply = found & torch::rand({n}, generator, FloatOptions(like)).lt(o.p);
  Boxes box;
  box.height = torch::where(apply, Pick(h, first), 0);
  box.width = torch::where(apply, Pick(w, first), 0);
  box.top = RandIntBelow(height - box.height + 1, generator);
  box.left = RandIntBelow(width - box.width + 1, generator);
  return box;
}

torch::Tensor Resize(const torch::Tensor& images, int64_t height, int64_t width) {
  if (images.size(2) == height && images.size(3) == width) return images;
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 7)
  // Apple's MPS device has _upsample_bilinear2d_aa from PyTorch 2.7 on (pytorch/pytorch#145526);
  // with an older LibTorch the resize runs on the CPU and the result goes back.
  if (images.device().type() == c10::DeviceType::MPS) {
    return Resize(images.cpu(), height, width).to(images.device());
  }
#endif
  return at::_upsample_bilinear2d_aa(images, {height, width}, /*align_corners=*/false, c10::nullopt,
                                     c10::nullopt);
}

torch::Tensor CenterCrop(const torch::Tensor& images, int64_t height, int64_t width) {
  const int64_t h = images.size(2), w = images.size(3);
  TORCH_CHECK(height <= h && width <= w, "Augment: center crop ", height, "x", width,
              " larger than the image ", h, "x", w);
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(h - height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(w - width) / 2.0));
  return images.narrow(/*dim=*/2, top, height).narrow(/*dim=*/3, left, width);
}

torch::Tensor ResizedCrop(const torch::Tensor& images, const torch::Tensor& top,
                          const torch::Tensor& left, const torch::Tensor& height,
                          const torch::Tensor& width, int64_t out_height, int64_t out_width) {
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const auto coordinates = [&](const torch::Tensor& start, const torch::Tensor& size, int64_t out,
                               int64_t full) {
    // F.interpolate's source index: (dst + 0.5) × size / out - 0.5, clamped to the crop, then
    // in grid_sample's normalised coordinates (align_corners=False): (2 x + 1) / full - 1.
    const torch::Tensor dst = torch::arange(out, FloatOptions(images)).view({1, out}) + 0.5;
    const torch::Tensor size_f = size.to(torch::kFloat32).view({n, 1});
    torch::Tensor src = dst * (size_f / static_cast<double>(out)) - 0.5;
    src = torch::maximum(src, torch::zeros({}, FloatOptions(images)));
    src = torch::minimum(src, size_f - 1) + start.to(torch::kFloat32).view({n, 1});
    return (2 * src + 1) / static_cast<double>(full) - 1;  // [N, out]
  };
  const torch::Tensor ys = coordinates(top, height, out_height, h);
  const torch::Tensor xs = coordinates(left, width, out_width, w);
  const torch::Tensor grid =
      torch::stack({xs.view({n, 1, out_width}).expand({n, out_height, out_width}),
                    ys.view({n, out_height, 1}).expand({n, out_height, out_width})},
                   /*dim=*/3);
  namespace F = torch::nn::functional;
  // The coordinates above stay inside the image, so the padding mode only decides the far
  // neighbour of a sample on the last row or column, whose weight is 0 up to float rounding:
  // border gives torchvision's values to the last bit. Apple's MPS grid sampler (MPSGraph's, in
  // LibTorch 2.x) has no border mode, so there it is zeros (equal within rounding).
  const bool mps = images.device().type() == c10::DeviceType::MPS;
  return F::grid_sample(
      images, grid.to(images.scalar_type()),
      F::GridSampleFuncOptions()
          .mode(torch::kBilinear)
          .padding_mode(mps ? F::GridSampleFuncOptions::padding_mode_t(torch::kZeros)
                            : F::GridSampleFuncOptions::padding_mode_t(torch::kBorder))
          .align_corners(false));
}

torch::Tensor Rotate(const torch::Tensor& images, const torch::Tensor& degrees,
                     const torch::Tensor& fill) {
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  // The output pixel at (x, y) from the centre (y down) comes from the input at R(-a) (x, y)
  // for a counter-clockwise rotation by a as displayed; in affine_grid's normalised
  // coordinates (x / (W/2), y / (H/2)) that is
  // [[cos a, -sin a · H/W, 0], [sin a · W/H, cos a, 0]].
  const torch::Tensor radians = degrees.to(torch::kFloat64) * (kPi / 180.0);
  const torch::Tensor c = radians.cos(), s = radians.sin();
  const torch::Tensor zero = torch::zeros_like(c);
  const double hw = static_cast<double>(h) / static_cast<double>(w);
  const torch::Tensor theta =
      torch::stack({torch::stack({c, -s * hw, zero}, 1), torch::stack({s / hw, c, zero}, 1)}, 1)
          .to(images.scalar_type());  // [N, 2, 3]
  namespace F = torch::nn::functional;
  const torch::Tensor grid = F::affine_grid(theta, {n, images.size(1), h, w},
                                            /*align_corners=*/false);
  // Nearest with zeros padding: on Apple's MPS device MPSGraph's grid sampler has both (macOS
  // 13.2 on, LibTorch 2.x).
  const auto options = F::GridSampleFuncOptions()
                           .mode(torch::kNearest)
                           .padding_mode(torch::kZeros)
                           .align_corners(false);
  if (!fill.defined()) return F::grid_sample(images, grid, options);
  // As functional_tensor._apply_grid_transform with a fill: a channel of ones is sampled along,
  // and where it comes back below 0.5 (outside the image) the pixel is the fill.
  const torch::Tensor ones = torch::ones({n, 1, h, w}, images.options());
  const torch::Tensor sampled = F::grid_sample(torch::cat({images, ones}, 1), grid, options);
  const torch::Tensor inside = sampled.narrow(1, images.size(1), 1).ge(0.5);
  return torch::where(inside, sampled.narrow(1, 0, images.size(1)),
                      ChannelVector(fill, images, "padding_fill"));
}

namespace {

// functional_tensor._rgb2hsv, on [N, 3, H, W].
torch::Tensor RgbToHsv(const torch::Tensor& img) {
  const torch::Tensor r = img.select(1, 0), g = img.select(1, 1), b = img.select(1, 2);
  const torch::Tensor maxc = std::get<0>(img.max(1)), minc = std::get<0>(img.min(1));
  const torch::Tensor eqc = maxc.eq(minc);
  const torch::Tensor cr = maxc - minc;
  const torch::Tensor ones = torch::ones_like(maxc);
  const torch::Tensor s = cr / torch::where(eqc, ones, maxc);
  const torch::Tensor cr_divisor = torch::where(eqc, ones, cr);
  const torch::Tensor rc = (maxc - r) / cr_divisor;
  const torch::Tensor gc = (maxc - g) / cr_divisor;
  const torch::Tensor bc = (maxc - b) / cr_divisor;
  const torch::Tensor hr = maxc.eq(r) * (bc - gc);
  const torch::Tensor hg = (maxc.eq(g) & maxc.ne(r)) * (2.0 + rc - bc);
  const torch::Tensor hb = (maxc.ne(g) & maxc.ne(r)) * (4.0 + gc - rc);
  const torch::Tensor h = torch::fmod(((hr + hg + hb) / 6.0 + 1.0), 1.0);
  return torch::stack({h, s, maxc}, 1);
}

// functional_tensor._hsv2rgb: its einsum with a one-hot mask picks, per pixel, one of six
// (r, g, b) triples; a gather picks the same values.
torch::Tensor HsvToRgb(const torch::Tensor& img) {
  const torch::Tensor h = img.select(1, 0), s = img.select(1, 1), v = img.select(1, 2);
  const torch::Tensor i_float = torch::floor(h * 6.0);
  const torch::Tensor f = (h * 6.0) - i_float;
  const torch::Tensor i = i_float.to(torch::kInt32).remainder(6).to(torch::kInt64);
  const torch::Tensor p = torch::clamp(v * (1.0 - s), 0.0, 1.0);
  const torch::Tensor q = torch::clamp(v * (1.0 - s * f), 0.0, 1.0);
  const torch::Tensor t = torch::clamp(v * (1.0 - s * (1.0 - f)), 0.0, 1.0);
  const torch::Tensor a1 = torch::stack({v, q, p, p, t, v}, 1);  // [N, 6, H, W]
  const torch::Tensor a2 = torch::stack({t, v, v, q, p, p}, 1);
  const torch::Tensor a3 = torch::stack({p, p, t, v, v, q}, 1);
  const torch::Tensor index = i.unsqueeze(1);
  return torch::cat({a1.gather(1, index), a2.gather(1, index), a3.gather(1, index)}, 1);
}

}  // namespace

torch::Tensor AdjustBrightness(const torch::Tensor& pixels, const torch::Tensor& factor) {
  return Blend(pixels, torch::zeros_like(pixels), factor);
}

torch::Tensor AdjustContrast(const torch::Tensor& pixels, const torch::Tensor& factor) {
  const torch::Tensor gray = pixels.size(1) == 3 ? Grayscale(pixels) : pixels;
  return Blend(pixels, gray.mean({1, 2, 3}, /*keepdim=*/true), factor);
}

torch::Tensor AdjustSaturation(const torch::Tensor& pixels, const torch::Tensor& factor) {
  if (pixels.size(1) == 1) return pixels;
  return Blend(pixels, Grayscale(pixels), factor);
}

torch::Tensor AdjustHue(const torch::Tensor& pixels, const torch::Tensor& factor) {
  if (pixels.size(1) == 1) return pixels;
  const torch::Tensor hsv = RgbToHsv(pixels);
  const torch::Tensor h =
      (hsv.select(1, 0) + factor.view({-1, 1, 1}).to(pixels.scalar_type())).remainder(1.0);
  return HsvToRgb(torch::stack({h, hsv.select(1, 1), hsv.select(1, 2)}, 1));
}

torch::Tensor Erase(const torch::Tensor& images, const torch::Tensor& top,
                    const torch::Tensor& left, const torch::Tensor& height,
                    const torch::Tensor& width, const torch::Tensor& value) {
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const torch::Tensor rows = torch::arange(h, IndexOptions(images)).view({1, h});
  const torch::Tensor cols = torch::arange(w, IndexOptions(images)).view({1, w});
  const torch::Tensor in_rows = rows.ge(top.view({n, 1})) & rows.lt((top + height).view({n, 1}));
  const torch::Tensor in_cols = cols.ge(left.view({n, 1})) & cols.lt((left + width).view({n, 1}));
  const torch::Tensor mask = in_rows.view({n, 1, h, 1}) & in_cols.view({n, 1, 1, w});
  return torch::where(mask, ChannelVector(value, images, "erase value"), images);
}

}  // namespace augment_kernels

torch::Tensor Preprocess(const torch::Tensor& images, const Preprocessing& preprocess) {
  if (!preprocess.enabled()) return images;
  TORCH_CHECK(images.dim() == 4, "Preprocess: expected images [N, C, H, W], got ", images.sizes());
  torch::NoGradGuard no_grad;
  torch::Tensor out = images;
  if (preprocess.resize_height > 0) {
    out = augment_kernels::Resize(out, preprocess.resize_height, preprocess.resize_width);
  }
  if (preprocess.crop_height > 0) {
    out = augment_kernels::CenterCrop(out, preprocess.crop_height, preprocess.crop_width);
  }
  return out;
}

torch::Tensor Augment(const torch::Tensor& images, const AugmentationOptions& options,
                      at::Generator& generator) {
  if (!options.enabled()) return images;
  TORCH_CHECK(images.dim() == 4, "Augment: expected images [N, C, H, W], got ", images.sizes());
  torch::NoGradGuard no_grad;
  torch::Tensor out = options.random_resized_crop.enabled
                          ? RandomResizedCrop(images, options.random_resized_crop, generator)
                          : Preprocess(images, options.preprocess);
  const int64_t padding = options.random_crop_padding;
  TORCH_CHECK(padding >= 0 && padding < out.size(2) && padding < out.size(3),
              "Augment: random_crop_padding ", padding, " outside [0, min(H, W)) for ",
              out.sizes());
  if (padding > 0) out = RandomCrop(out, padding, options.padding_fill, generator);
  if (options.horizontal_flip) out = RandomHorizontalFlip(out, generator);
  if (options.rotation) out = RandomRotation(out, options, generator);
  if (options.color_jitter.enabled()) out = ColorJitter(out, options, generator);
  if (options.random_erasing.p > 0) out = RandomErasing(out, options.random_erasing, generator);
  return out;
}

MixedBatch MixBatch(const torch::Tensor& images, const torch::Tensor& labels, int64_t num_classes,
                    const AugmentationOptions& options, at::Generator& generator) {
  TORCH_CHECK(options.mixes(), "MixBatch: neither mixup nor cutmix is set");
  TORCH_CHECK(images.dim() == 4, "MixBatch: expected images [N, C, H, W], got ", images.sizes());
  TORCH_CHECK(labels.dim() == 1 && labels.scalar_type() == torch::kInt64 &&
                  labels.size(0) == images.size(0),
              "MixBatch: expected labels [", images.size(0), "] int64, got ", labels.sizes(), " ",
              labels.scalar_type());
  torch::NoGradGuard no_grad;
  const int64_t h = images.size(2), w = images.size(3);
  // One-hot rows by a scatter: torch::one_hot checks the labels' range on the host (a sync).
  const torch::Tensor targets = torch::zeros({labels.size(0), num_classes}, FloatOptions(images))
                                    .scatter_(/*dim=*/1, labels.view({-1, 1}), 1.0);
  const torch::Tensor images_rolled = images.roll(1, 0);
  const torch::Tensor targets_rolled = targets.roll(1, 0);
  torch::Tensor mixed_images, lambda;  // lambda: [1] float32
  torch::Tensor mixup_images, mixup_lambda, cutmix_images, cutmix_lambda;
  if (options.mixup_alpha > 0) {
    mixup_lambda = SampleBeta(options.mixup_alpha, images, generator);
    const torch::Tensor l = mixup_lambda.to(images.scalar_type());
    mixup_images = images * l + images_rolled * (1 - l);
  }
  if (options.cutmix_alpha > 0) {
    const torch::Tensor drawn = SampleBeta(options.cutmix_alpha, images, generator);
    const auto index_options = IndexOptions(images);
    const torch::Tensor r_x = torch::randint(w, {1}, generator, index_options);
    const torch::Tensor r_y = torch::randint(h, {1}, generator, index_options);
    const torch::Tensor r = 0.5 * (1 - drawn).sqrt();
    const torch::Tensor r_w_half = (r * static_cast<double>(w)).floor().to(torch::kInt64);
    const torch::Tensor r_h_half = (r * static_cast<double>(h)).floor().to(torch::kInt64);
    const torch::Tensor x1 = (r_x - r_w_half).clamp_min(0);
    const torch::Tensor y1 = (r_y - r_h_half).clamp_min(0);
    const torch::Tensor x2 = (r_x + r_w_half).clamp_max(w);
    const torch::Tensor y2 = (r_y + r_h_half).clamp_max(h);
    const torch::Tensor rows = torch::arange(h, index_options);
    const torch::Tensor cols = torch::arange(w, index_options);
    const torch::Tensor mask = (rows.ge(y1) & rows.lt(y2)).view({1, 1, h, 1}) &
                               (cols.ge(x1) & cols.lt(x2)).view({1, 1, 1, w});
    cutmix_images = torch::where(mask, images_rolled, images);
    cutmix_lambda = 1 - ((x2 - x1) * (y2 - y1)).to(torch::kFloat32) / static_cast<double>(w * h);
  }
  if (mixup_images.defined() && cutmix_images.defined()) {
    const torch::Tensor take_mixup = torch::rand({1}, generator, FloatOptions(images)).lt(0.5);
    mixed_images = torch::where(take_mixup.view({1, 1, 1, 1}), mixup_images, cutmix_images);
    lambda = torch::where(take_mixup, mixup_lambda, cutmix_lambda);
  } else if (mixup_images.defined()) {
    mixed_images = mixup_images, lambda = mixup_lambda;
  } else {
    mixed_images = cutmix_images, lambda = cutmix_lambda;
  }
  return {mixed_images, targets * lambda + targets_rolled * (1 - lambda)};
}

}  // namespace mpsd::trainer
