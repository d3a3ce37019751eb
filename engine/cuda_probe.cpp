#include "engine/cuda_probe.hpp"

#if KILN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace kiln::engine {

std::string cuda_unavailable_reason() {
#if KILN_HAVE_CUDA
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  return n > 0 ? std::string() : std::string("no CUDA device");
#else
  return "kiln was built without CUDA (no nvcc)";
#endif
}

}  // namespace kiln::engine
