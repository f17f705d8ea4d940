// CUDA graphs (trainer/compat/cuda_graph.h).
#include "trainer/compat/cuda_graph.h"

#include <mutex>
#include <optional>

#include "trainer/compat/platform.h"

namespace mpsd::trainer::compat {
namespace {

[[noreturn]] void NoCudaGraphs() { TORCH_CHECK(false, "CUDA graphs need a CUDA LibTorch >= 2.2"); }

}  // namespace

bool HasCudaGraphs() { return MPSD_TRAINER_HAS_CUDA_GRAPHS; }

bool CudaGraph::TakesGenerators() { return MPSD_TRAINER_CUDA_GRAPHS_TAKE_GENERATORS; }

struct CudaGraph::Cuda {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  at::cuda::CUDAGraph graph;
  std::optional<c10::cuda::CUDAStream> side;
#endif
};

CudaGraph::CudaGraph() {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  cuda_ = std::make_unique<Cuda>();
#endif
}

CudaGraph::~CudaGraph() = default;

void CudaGraph::Capture(int device_index, const std::function<void()>& fn,
                        const CudaGraph* share_pool_with,
                        const std::vector<at::Generator>& generators) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
#if MPSD_TRAINER_CUDA_GRAPHS_TAKE_GENERATORS
  for (const at::Generator& generator : generators) {
    cuda_->graph.register_generator_state(generator);
  }
#else
  TORCH_CHECK(generators.empty(), "CUDA graphs that advance generators besides the default one ",
              "need LibTorch >= 2.4");
#endif
  OnSideStream(device_index, [&] {
    if (share_pool_with != nullptr) {
      cuda_->graph.capture_begin(share_pool_with->cuda_->graph.pool());
    } else {
      cuda_->graph.capture_begin();
    }
    fn();
    cuda_->graph.capture_end();
  });
#else
  (void)device_index, (void)fn, (void)share_pool_with, (void)generators;
  NoCudaGraphs();
#endif
}

void CudaGraph::OnSideStream(int device_index, const std::function<void()>& fn) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  const auto index = static_cast<c10::DeviceIndex>(device_index);
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(index);
  if (!cuda_->side.has_value()) {
    cuda_->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
  }
  const c10::cuda::CUDAStream side = *cuda_->side;
  at::cuda::CUDAEvent current_ready;  // the side stream starts after the current one's work
  current_ready.record(current);
  current_ready.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    fn();
  }
  at::cuda::CUDAEvent side_done;  // and the current stream continues after the side's
  side_done.record(side);
  side_done.block(current);
#else
  (void)device_index, (void)fn;
  NoCudaGraphs();
#endif
}

torch::Tensor CudaGraph::GetRngState(int device_index) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  at::Generator generator =
      at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device_index));
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
#else
  (void)device_index;
  NoCudaGraphs();
#endif
}

void CudaGraph::SetRngState(int device_index, const torch::Tensor& state) {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  at::Generator generator =
      at::cuda::detail::getDefaultCUDAGenerator(static_cast<c10::DeviceIndex>(device_index));
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
#else
  (void)device_index, (void)state;
  NoCudaGraphs();
#endif
}

void CudaGraph::Replay() {
#if MPSD_TRAINER_HAS_CUDA_GRAPHS
  cuda_->graph.replay();
#else
  NoCudaGraphs();
#endif
}

}  // namespace mpsd::trainer::compat
