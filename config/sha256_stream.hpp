#pragma once
// SHA-256 over bytes that arrive in pieces (a file read in blocks, a download as it comes),
// for the model hashes and the weights puller (internal to config/).
#include <cstddef>
#include <memory>
#include <string>

namespace kiln::config {

class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;
  void update(const void* p, std::size_t n);
  /// The digest of everything so far, as 64 hex digits (once: the stream is finished).
  std::string hex_digest();

 private:
  struct ctx;
  std::unique_ptr<ctx> c_;
};

}  // namespace kiln::config
