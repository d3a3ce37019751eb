#include "config/model_hash.hpp"
#include "config/sha256_stream.hpp"

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

struct sha256_stream::ctx {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> md{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

sha256_stream::sha256_stream() : c_(std::make_unique<ctx>()) { EVP_DigestInit_ex(c_->md.get(), EVP_sha256(), nullptr); }
sha256_stream::~sha256_stream() = default;

void sha256_stream::update(const void* p, std::size_t n) { EVP_DigestUpdate(c_->md.get(), p, n); }

std::string sha256_stream::hex_digest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(c_->md.get(), digest, &n);
  return hex(digest, n);
}

std::variant<std::string, std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::variant<std::string, std::string>(std::in_place_index<1>, path + ": cannot be read");
  sha256_stream sum;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) sum.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) return std::variant<std::string, std::string>(std::in_place_index<1>, path + ": read failed");
  return std::variant<std::string, std::string>(std::in_place_index<0>, sum.hex_digest());
}

std::variant<std::string, std::string> local_dir_of(const std::string& uri) {
  using result = std::variant<std::string, std::string>;
  std::string path = uri;
  if (path.starts_with("file://")) {
    path = path.substr(7);
    if (!path.starts_with("/")) return result(std::in_place_index<1>, "'" + uri + "' must be file:///absolute/path");
  } else if (path.find("://") != std::string::npos) {
    return result(std::in_place_index<1>, "'" + uri + "': only local model directories (file:// or a path) and http:// artifact endpoints are supported");
  }
  if (path.empty()) return result(std::in_place_index<1>, "the weights URI is empty");
  if (path.starts_with("~/"))
    if (const char* home = std::getenv("HOME")) path = std::string(home) + path.substr(1);
  return result(std::in_place_index<0>, path);
}

bool is_hashed_file(const std::string& name) { return hashed_file(name); }

std::variant<model_hashes, std::string> hashes_of(std::vector<file_hash> files, const std::string& where) {
  std::sort(files.begin(), files.end(), [](const file_hash& a, const file_hash& b) { return a.file < b.file; });
  model_hashes h;
  std::string manifest;
  bool weights = false;
  for (auto& f : files) {
    if (!hashed_file(f.file)) continue;
    if (hashed_weights_file(f.file)) {
      manifest += f.file + " " + f.sha256 + "\n";
      weights = weights || f.file.ends_with(".safetensors");
    }
    if (f.file == "tokenizer.json") h.tokenizer_hash = f.sha256;
    h.files.push_back(std::move(f));
  }
  if (!weights) return where + ": no *.safetensors weights";
  h.weights_hash = sha256_hex(manifest);
  return h;
}

std::variant<model_hashes, std::string> hash_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return dir + ": not a directory";
  std::vector<file_hash> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !hashed_file(name)) continue;
    auto sum = sha256_file(dir + "/" + name);
    if (sum.index() == 1) return std::get<1>(sum);
    files.push_back({name, std::get<0>(sum)});
  }
  if (ec) return dir + ": " + ec.message();
  return hashes_of(std::move(files), dir);
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
