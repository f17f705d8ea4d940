// PredictJob: a trained model run on inputs given as files (mpsd.proto, PredictJob; `mpsctl
// predict`), with the preprocessing stored in its model.json. The executor calls these on its
// own thread; this header is torch-free.
#ifndef MPSD_TRAINER_PREDICT_JOB_H_
#define MPSD_TRAINER_PREDICT_JOB_H_

#include <atomic>

#include "absl/status/status.h"
#include "mpsd/v1/mpsd.pb.h"
#include "trainer/torch_executor.h"

namespace mpsd::trainer {

struct DeviceInventory;  // trainer/device.h

// Checks a PredictJob without decoding anything or touching device memory: the model as
// ValidateEvalJob finds it (trainer/trained_model.h), at least one input and each an existing
// image file (by name: .png, .jpg, .jpeg), a folder holding such files, or a ".pt" tensors file;
// at most 10,000 images in all; an image model for images; top_k in [1, 1000]; the device
// known. INVALID_ARGUMENT naming the field: "predict_job.inputs[1]: /x/a.gif: not a PNG or JPEG
// file, a folder of them or a .pt tensors file", "predict_job.model: no such file …". Reads the
// file system only; thread-safe.
absl::Status ValidatePredictJob(const mpsd::v1::PredictJob& job, const DeviceInventory& inventory,
                                const api::Executor::Options& options);

// Runs a PredictJob on the calling thread: decodes every image (ReadImageFile and ResizeInto of
// trainer/image_decode.h, as image_folder does) or reads the tensors files, preprocesses them as
// model.json says (uint8 pixels / 255, then (x - mean[c]) / std[c]; float tensors as they are),
// loads the model, runs the forward passes in eval mode without autograd (batches of 256,
// cancellation checked between them) and emits one `prediction` event per input, a `log` line
// with the forward time, and last a `summary` event (predictions, forward_time_ms). An image that
// does not decode fails the job before any prediction: DATA_LOSS "<path>: not a JPEG or PNG
// file" (or the decoder's message after the path). Other errors as RunEvalJob's. Never throws.
// Not thread-safe with itself (one device owner).
absl::Status RunPredictJob(const mpsd::v1::PredictJob& job, const DeviceInventory& inventory,
                           const api::Executor::Options& options, const EventSink& sink,
                           const std::atomic<bool>& cancelled);

}  // namespace mpsd::trainer

#endif  // MPSD_TRAINER_PREDICT_JOB_H_
