#pragma once
// OpenAI's Files and Batches as the store keeps them: one row per uploaded (or produced) file,
// whose bytes live in the files directory, and one row per batch with its state and counts.
#include <cstdint>
#include <string>

namespace kiln::config {

struct file_row {
  std::string id;        ///< "file-" + 24 hex digits
  std::string team;      ///< whose it is
  std::string purpose;   ///< batch | batch_output
  std::string filename;  ///< as uploaded
  std::int64_t bytes = 0;
  std::int64_t created_at = 0;  ///< unix seconds
  std::string path;      ///< where its bytes are
};

/// A batch's life: validating -> in_progress -> finalizing -> completed, or failed, expired
/// (its deadline passed), cancelling -> cancelled.
struct batch_row {
  std::string id;  ///< "batch_" + 24 hex digits
  std::string team;
  std::string model;     ///< every line's model
  std::string endpoint;  ///< /v1/chat/completions or /v1/completions
  std::string input_file_id;
  std::string completion_window;  ///< as asked ("24h")
  std::string metadata;           ///< a JSON object's text ("" for none)
  std::string status = "validating";
  std::string output_file_id;  ///< set when it ends with at least one answer
  std::string error_file_id;   ///< set when it ends with at least one failed line
  std::string errors;          ///< a JSON array's text: why the input was refused ("" for none)
  std::string input_path;      ///< the input's bytes
  std::string output_path;     ///< where the answers go (seed 000's output_uri, or the files directory)
  std::string error_path;
  std::string node;            ///< the node that runs it (its files are on that node's disk)
  std::int64_t created_at = 0;
  std::int64_t expires_at = 0;  ///< the deadline: lines not done by then end as expired
  std::int64_t in_progress_at = 0;
  std::int64_t finalizing_at = 0;
  std::int64_t completed_at = 0;
  std::int64_t failed_at = 0;
  std::int64_t expired_at = 0;
  std::int64_t cancelling_at = 0;
  std::int64_t cancelled_at = 0;
  std::int64_t total = 0;
  std::int64_t completed = 0;
  std::int64_t failed = 0;

  /// Whether nothing more will happen to it.
  bool ended() const {
    return status == "completed" || status == "failed" || status == "expired" || status == "cancelled";
  }
};

}  // namespace kiln::config
