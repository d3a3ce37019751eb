#include "engine/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace kiln::engine {

namespace {

constexpr std::uint64_t kMaxHeader = 100ull << 20;

bool parse_dtype(const std::string& s, dtype& out) {
  if (s == "F32") out = dtype::f32;
  else if (s == "F16") out = dtype::f16;
  else if (s == "BF16") out = dtype::bf16;
  else return false;
  return true;
}

const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
  }
  return "?";
}

}  // namespace

std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
  }
  return 0;
}

std::int64_t tensor_view::elements() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<std::uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t float_to_half(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t absbits = bits & 0x7fffffffu;
  if (absbits >= 0x7f800000u) return sign | 0x7c00u | (absbits > 0x7f800000u ? 0x200u : 0u);
  if (absbits >= 0x477ff000u) return sign | 0x7c00u;  // overflow to infinity
  if (absbits < 0x38800000u) {                        // subnormal or zero in half
    if (absbits < 0x33000000u) return sign;
    const std::uint32_t mant = (absbits & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(absbits >> 23);
    std::uint32_t half = mant >> (shift + 1);
    const std::uint32_t rest = mant & ((1u << (shift + 1)) - 1);
    const std::uint32_t halfway = 1u << shift;
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return sign | static_cast<std::uint16_t>(half);
  }
  std::uint32_t h = ((absbits >> 23) - 127 + 15) << 10 | ((absbits >> 13) & 0x3ffu);
  const std::uint32_t rest = absbits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<std::uint16_t>(h);
}

std::vector<float> to_f32(const tensor_view& v) {
  const auto n = static_cast<std::size_t>(v.elements());
  std::vector<float> out(n);
  switch (v.type) {
    case dtype::f32:
      std::memcpy(out.data(), v.data, n * 4);
      break;
    case dtype::f16:
    case dtype::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.data + 2 * i, 2);
        out[i] = v.type == dtype::f16 ? half_to_float(h) : bf16_to_float(h);
      }
      break;
  }
  return out;
}

std::variant<std::shared_ptr<safetensors_file>, std::string> safetensors_file::open(const std::string& path) {
  std::shared_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return path + ": cannot open: " + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return path + ": not a regular file";
  }
  f->size_ = static_cast<std::size_t>(st.st_size);
  if (f->size_ < 8) {
    ::close(fd);
    return path + ": truncated: " + std::to_string(f->size_) + " bytes, no header";
  }
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return path + ": cannot map: " + std::strerror(errno);
  f->map_ = m;
  const auto* bytes = static_cast<const std::byte*>(m);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<std::uint8_t>(bytes[i]);
  if (header_len > kMaxHeader || header_len > f->size_ - 8)
    return path + ": truncated or corrupt: header of " + std::to_string(header_len) + " bytes in a file of " +
           std::to_string(f->size_);
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), header_len);
  const auto header = nlohmann::json::parse(text, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return path + ": header is not a JSON object";
  const std::size_t data_start = 8 + header_len;
  const std::size_t data_size = f->size_ - data_start;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor '" + name + "'";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      return where + " lacks dtype, shape or data_offsets";
    tensor_view v;
    if (!info["dtype"].is_string() || !parse_dtype(info["dtype"].get<std::string>(), v.type))
      return where + " has an unsupported dtype " + info["dtype"].dump() + " (F32, F16, BF16 are)";
    std::uint64_t elements = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) return where + " has a bad shape";
      const auto dim = d.get<std::uint64_t>();
      if (dim != 0 && elements > std::numeric_limits<std::uint64_t>::max() / 16 / dim) return where + " is too large";
      elements *= dim;
      v.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return where + " has bad data_offsets";
    const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      return where + " lies outside the file (truncated?): bytes " + std::to_string(begin) + ".." +
             std::to_string(end) + " of " + std::to_string(data_size);
    if (end - begin != elements * dtype_size(v.type))
      return where + ": " + std::to_string(end - begin) + " bytes do not match " + dtype_name(v.type) + " shape";
    v.data = bytes + data_start + begin;
    v.bytes = end - begin;
    f->tensors_.emplace(name, std::move(v));
  }
  return f;
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, size_);
}

const tensor_view* safetensors_file::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string write_safetensors(const std::string& path, const std::vector<tensor_out>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = t.values.size() * dtype_size(t.type);
    header[t.name] = {{"dtype", dtype_name(t.type)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return path + ": cannot write";
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) {
    if (t.type == dtype::f32) {
      out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * 4));
      continue;
    }
    std::vector<std::uint16_t> half(t.values.size());
    for (std::size_t i = 0; i < half.size(); ++i)
      half[i] = t.type == dtype::f16 ? float_to_half(t.values[i]) : float_to_bf16(t.values[i]);
    out.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
  }
  return out ? std::string() : path + ": write failed";
}

}  // namespace kiln::engine
