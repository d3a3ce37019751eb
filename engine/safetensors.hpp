#pragma once
// safetensors files: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the data. The reader memory-maps the file and checks every
// number before use (header length, ranges against the file, range sizes against dtype x shape),
// so a truncated or corrupt file is an error, never an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace kiln::engine {

enum class dtype { f32, f16, bf16 };
std::size_t dtype_size(dtype t);

struct tensor_view {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::int64_t elements() const;
};

/// A memory-mapped safetensors file; views stay valid while it lives.
class safetensors_file {
 public:
  /// The file, or one line saying what is wrong with it.
  static std::variant<std::shared_ptr<safetensors_file>, std::string> open(const std::string& path);
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::map<std::string, tensor_view>& tensors() const { return tensors_; }
  const tensor_view* find(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  safetensors_file() = default;
  std::string path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::map<std::string, tensor_view> tensors_;
};

/// A tensor to write: F32 values stored as `type` (F16/BF16 rounded to nearest even).
struct tensor_out {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  dtype type = dtype::f32;
};

/// Writes a safetensors file; an error line, or empty on success.
std::string write_safetensors(const std::string& path, const std::vector<tensor_out>& tensors);

/// Element conversions.
float half_to_float(std::uint16_t h);
float bf16_to_float(std::uint16_t b);
std::uint16_t float_to_half(float f);
std::uint16_t float_to_bf16(float f);
/// Copies a view into F32.
std::vector<float> to_f32(const tensor_view& v);

}  // namespace kiln::engine
