#pragma once
// Captured requests for replay (`kiln serve --capture FILE`, `kiln sim --trace FILE.kcap`):
// one msgpack map per served request with its arrival time, team, tier, conversation id, the
// hashes of its prompt's 16-token blocks (equal blocks, equal hashes; never the text) and its
// output length. A writer thread appends them, so no actor waits on the disk.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace kiln::config {

/// Tokens per hashed prompt block in a capture.
inline constexpr int kCaptureBlockTokens = 16;

struct capture_record {
  double t = 0;  ///< seconds since the node started
  std::string team;
  std::uint8_t tier = 1;  ///< engine::priority: 0 interactive, 1 standard, 2 batch
  std::string conversation;
  std::vector<std::uint64_t> block_hashes;
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;
};

std::string encode_capture(const capture_record& r);
/// Every record of a file in time order; a torn last record (a crash mid-write) is dropped.
std::variant<std::vector<capture_record>, std::string> read_capture(const std::string& path);
/// Hashes of a prompt's token blocks (the last may be partial).
std::vector<std::uint64_t> block_hashes_of(const std::vector<std::int32_t>& prompt);

/// Appends records to a file on its own thread.
class capture_log {
 public:
  /// Opens (appending to) `path`; an error names the file.
  static std::variant<std::shared_ptr<capture_log>, std::string> open(const std::string& path);
  ~capture_log();
  capture_log(const capture_log&) = delete;
  capture_log& operator=(const capture_log&) = delete;
  /// Queues a record; never blocks on the disk.
  void add(capture_record r);
  /// Records written so far.
  std::uint64_t written() const;

 private:
  explicit capture_log(int fd);
  void run();
  int fd_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<capture_record> queue_;
  bool stopping_ = false;
  std::uint64_t written_ = 0;
  std::thread thread_;
};

}  // namespace kiln::config
