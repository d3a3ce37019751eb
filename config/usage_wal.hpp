#pragma once
// The usage write-ahead log: every finished request (and every refusal) as one msgpack record,
// appended and fsync'd before it counts. Records go to numbered segment files next to the
// store; folding closes the open segment, and once its rows are in the store (with the last
// sequence number they include) the folded segments are deleted. After a crash, the records
// past the store's watermark are folded again: nothing lost, nothing counted twice.
// Blocking: only the meter's own thread uses it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/store.hpp"

namespace kiln::config {


/// Folds records into usage rows, one per (team, model, version, minute), each request once.
std::vector<usage_row> fold(const std::vector<usage_record>& records);

/// The watermark a meter last folded into a store on another node, kept beside its log
/// (durably, whole or not at all: false when it could not be); 0 when there is none.
bool write_watermark(const std::string& path, std::uint64_t seq);
std::uint64_t read_watermark(const std::string& path);

class usage_wal {
 public:
  /// Segments are `<prefix>.<n>`.
  explicit usage_wal(std::string prefix);
  ~usage_wal();
  usage_wal(const usage_wal&) = delete;
  usage_wal& operator=(const usage_wal&) = delete;

  /// Every record in every segment, in order; a torn last record (a crash mid-write) is
  /// dropped. Call before appending.
  std::vector<usage_record> read_all();
  /// Appends records to the open segment and fsyncs it; the error, or nothing.
  std::optional<std::string> append(const std::vector<usage_record>& records);
  /// Closes the open segment: later records go to a new one. Returns the closed segments.
  std::vector<std::string> rotate();
  /// Deletes segments (once their records are in the store).
  void remove(const std::vector<std::string>& segments);
  /// The segments on disk now, oldest first.
  std::vector<std::string> segments() const;

 private:
  std::string prefix_;
  int fd_ = -1;
  std::uint64_t open_index_ = 0;  ///< the segment records go to
};

}  // namespace kiln::config
