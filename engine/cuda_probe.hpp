#pragma once
// Whether this build and machine can run the cuda executor, without including CUDA.
#include <string>

namespace kiln::engine {

/// Empty when a CUDA device is usable; else why not ("built without CUDA", "no CUDA device").
std::string cuda_unavailable_reason();

}  // namespace kiln::engine
