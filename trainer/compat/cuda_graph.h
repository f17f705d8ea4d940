// CUDA graphs of work issued on the current thread (the graphed training step,
// trainer/graphed_step.h), where LibTorch can capture: a CUDA LibTorch >= 2.2. Internal to
// trainer/: includes torch.
#ifndef MPSD_TRAINER_COMPAT_CUDA_GRAPH_H_
#define MPSD_TRAINER_COMPAT_CUDA_GRAPH_H_

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace mpsd::trainer::compat {

// Whether this LibTorch can capture CUDA graphs of a training step: CUDA (c10_cuda) and the
// fused Adam kernels with a tensor learning rate (LibTorch >= 2.2). Thread-safe.
bool HasCudaGraphs();

// A CUDA graph of work issued on the current thread: Capture(fn) runs `fn` on a side stream
// while the graph records it (nothing executes), Replay() launches the recorded kernels on the
// current stream. Tensors created inside `fn` live in the graph's private memory pool for the
// graph's lifetime: their addresses are what Replay reads and writes. Dropout and other RNG
// users draw from the default CUDA generator, which PyTorch advances per replay. Without
// HasCudaGraphs() every call throws c10::Error. Not thread-safe.
class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // `share_pool_with` (optional, must outlive this graph): capture into that graph's private
  // memory pool instead of a new one (PyTorch's `pool=other.pool()`), for graphs that never
  // replay concurrently: this graph's temporaries reuse the other's, so the two cost the device
  // the larger of their working sets, not the sum. Tensors alive across replays (either graph's
  // outputs) are never reused.
  // `generators` (optional): CUDA generators besides the default one that `fn` draws from (a
  // fused step's per-trial dropout); each is registered with the graph, so that every replay
  // advances its Philox offset as the default generator's is advanced. Needs
  // TakesGenerators(); throws c10::Error otherwise.
  void Capture(int device_index, const std::function<void()>& fn,
               const CudaGraph* share_pool_with = nullptr,
               const std::vector<at::Generator>& generators = {});

  // Whether Capture takes generators other than the default one: LibTorch >= 2.4
  // (at::cuda::CUDAGraph::register_generator_state) with CUDA graphs. Thread-safe.
  static bool TakesGenerators();

  // Runs `fn` eagerly on the graph's side stream (warm-up before a capture, as PyTorch's recipe
  // does: cuBLAS/cuDNN handles and workspaces get created outside the graph). Warm-up and capture
  // share one side stream, so that cuBLAS keeps one workspace for it.
  void OnSideStream(int device_index, const std::function<void()>& fn);

  // The default CUDA generator's state (seed and Philox offset), to put back after a warm-up so
  // that the replays draw dropout's numbers where an eager run from the same seed would.
  static torch::Tensor GetRngState(int device_index);
  static void SetRngState(int device_index, const torch::Tensor& state);

  void Replay();

 private:
  struct Cuda;                  // the graph and its side stream (trainer/compat/cuda_graph.cc)
  std::unique_ptr<Cuda> cuda_;  // null without HasCudaGraphs()
};

}  // namespace mpsd::trainer::compat

#endif  // MPSD_TRAINER_COMPAT_CUDA_GRAPH_H_
