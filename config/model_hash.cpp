#include "config/model_hash.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

namespace kiln::config {

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

bool hashed_weights_file(const std::string& name) { return name == "config.json" || name.ends_with(".safetensors"); }
bool hashed_file(const std::string& name) {
  return hashed_weights_file(name) || name == "tokenizer.json" || name == "tokenizer_config.json";
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  return hex(digest, n);
}

std::variant<std::string, std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::variant<std::string, std::string>(std::in_place_index<1>, path + ": cannot be read");
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) return std::variant<std::string, std::string>(std::in_place_index<1>, path + ": read failed");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &n);
  return std::variant<std::string, std::string>(std::in_place_index<0>, hex(digest, n));
}

std::variant<std::string, std::string> local_dir_of(const std::string& uri) {
  using result = std::variant<std::string, std::string>;
  std::string path = uri;
  if (path.starts_with("file://")) {
    path = path.substr(7);
    if (!path.starts_with("/")) return result(std::in_place_index<1>, "'" + uri + "' must be file:///absolute/path");
  } else if (path.find("://") != std::string::npos) {
    return result(std::in_place_index<1>, "'" + uri + "': only local model directories (file:// or a path) are supported");
  }
  if (path.empty()) return result(std::in_place_index<1>, "the weights URI is empty");
  if (path.starts_with("~/"))
    if (const char* home = std::getenv("HOME")) path = std::string(home) + path.substr(1);
  return result(std::in_place_index<0>, path);
}

std::variant<model_hashes, std::string> hash_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return dir + ": not a directory";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && hashed_file(e.path().filename().string())) names.push_back(e.path().filename().string());
  if (ec) return dir + ": " + ec.message();
  std::sort(names.begin(), names.end());
  model_hashes h;
  std::string manifest;
  bool weights = false;
  for (const auto& name : names) {
    auto sum = sha256_file(dir + "/" + name);
    if (sum.index() == 1) return std::get<1>(sum);
    const std::string& hex_sum = std::get<0>(sum);
    h.files.push_back({name, hex_sum});
    if (hashed_weights_file(name)) {
      manifest += name + " " + hex_sum + "\n";
      weights = weights || name.ends_with(".safetensors");
    }
    if (name == "tokenizer.json") h.tokenizer_hash = hex_sum;
  }
  if (!weights) return dir + ": no *.safetensors weights";
  h.weights_hash = sha256_hex(manifest);
  return h;
}

std::string verify_model_dir(const std::string& dir, const std::vector<file_hash>& recorded) {
  for (const auto& f : recorded) {
    auto sum = sha256_file(dir + "/" + f.file);
    if (sum.index() == 1) return std::get<1>(sum);
    if (std::get<0>(sum) != f.sha256)
      return dir + "/" + f.file + ": SHA-256 " + std::get<0>(sum) + " differs from the registered " + f.sha256;
  }
  return {};
}

}  // namespace kiln::config
