#include "config/capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <msgpack.hpp>
#include <xxhash.h>

namespace kiln::config {

namespace {

struct wire_capture {
  double t = 0;
  std::string team;
  std::uint8_t tier = 1;
  std::string conversation;
  std::vector<std::uint64_t> blocks;
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;
  MSGPACK_DEFINE_MAP(t, team, tier, conversation, blocks, prompt_tokens, output_tokens);
};

}  // namespace

std::string encode_capture(const capture_record& r) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, wire_capture{r.t, r.team, r.tier, r.conversation, r.block_hashes, r.prompt_tokens, r.output_tokens});
  return std::string(buf.data(), buf.size());
}

std::variant<std::vector<capture_record>, std::string> read_capture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read capture " + path;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<capture_record> out;
  std::size_t off = 0;
  while (off < bytes.size()) {
    try {
      const msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), off);
      const wire_capture w = h.get().as<wire_capture>();
      if (!std::isfinite(w.t) || w.t < 0 || w.prompt_tokens < 0 || w.output_tokens < 0)
        return path + ": record " + std::to_string(out.size() + 1) + " is out of range";
      out.push_back({w.t, w.team, w.tier, w.conversation, w.blocks, w.prompt_tokens, w.output_tokens});
    } catch (const msgpack::insufficient_bytes&) {
      break;  // a torn last record: the writer died mid-record
    } catch (const std::exception& e) {
      return path + ": record " + std::to_string(out.size() + 1) + " is not a capture record (" + e.what() + ")";
    }
  }
  // Written as requests end: put them back in arrival order.
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.t < b.t; });
  return out;
}

std::vector<std::uint64_t> block_hashes_of(const std::vector<std::int32_t>& prompt) {
  std::vector<std::uint64_t> out;
  for (std::size_t off = 0; off < prompt.size(); off += kCaptureBlockTokens) {
    const std::size_t n = std::min<std::size_t>(kCaptureBlockTokens, prompt.size() - off);
    out.push_back(XXH3_64bits(prompt.data() + off, n * sizeof(std::int32_t)));
  }
  return out;
}

std::variant<std::shared_ptr<capture_log>, std::string> capture_log::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot open capture file " + path + ": " + std::strerror(errno);
  return std::shared_ptr<capture_log>(new capture_log(fd));
}

capture_log::capture_log(int fd) : fd_(fd), thread_([this] { run(); }) {}

capture_log::~capture_log() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
  ::close(fd_);
}

void capture_log::add(capture_record r) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(r));
  }
  cv_.notify_one();
}

std::uint64_t capture_log::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

void capture_log::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) return;
    std::deque<capture_record> batch;
    batch.swap(queue_);
    lock.unlock();
    std::string bytes;
    for (const auto& r : batch) bytes += encode_capture(r);
    for (std::size_t off = 0; off < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // a full disk: the capture stops growing; serving goes on
      off += static_cast<std::size_t>(n);
    }
    lock.lock();
    written_ += batch.size();
  }
}

}  // namespace kiln::config
