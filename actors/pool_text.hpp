#pragma once
// What a pool needs on a node that runs none of its engines (a router node whose replicas run
// on worker nodes): the tokenizer and chat template, without reading the weights.
#include <memory>

#include "actors/pool_runtime.hpp"

namespace kiln::actors {

/// As prepare_pool (the files checked or pulled as there), but the weights stay on disk and a
/// cuda pool needs no device.
std::shared_ptr<const pool_runtime> prepare_pool_text(const config::pool_config& cfg);

}  // namespace kiln::actors
