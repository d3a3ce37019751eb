#pragma once
// The paged KV cache as kernels see it: a non-owning view (no CUDA types, no ownership), the
// only thing about paging that crosses from engine/ into kernels/.
#include <cstdint>

namespace kiln::kernels {

/// One layer's K and V blocks, [num_blocks][block_size][kv_heads][head_dim] floats each, and
/// the block tables of the sequences a launch covers.
struct paged_kv_view {
  float* k = nullptr;
  float* v = nullptr;
  int block_size = 16;
  int kv_heads = 0;
  int head_dim = 0;
  const std::int32_t* block_tables = nullptr;  ///< [num_seqs][max_blocks_per_seq]
  int max_blocks_per_seq = 0;
};

/// Which sequence and position each query row is: row r attends to positions 0..pos[r] of
/// sequence seq[r] (causal; earlier chunks come from the cache).
struct attention_rows {
  const std::int32_t* seq = nullptr;  ///< [rows]
  const std::int32_t* pos = nullptr;  ///< [rows]
  int rows = 0;
};

}  // namespace kiln::kernels
