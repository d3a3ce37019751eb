#pragma once
// SHA-256 of a model directory's files: what the registry records for a version and checks
// again before a replica loads it. The weights hash covers config.json and every
// *.safetensors file (one "name sha256" line each, sorted by name, hashed); the tokenizer
// hash is tokenizer.json's. Every hashed file is also kept by name, so a later mismatch names
// the file that changed.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::config {

struct file_hash {
  std::string file;    ///< name inside the model directory
  std::string sha256;  ///< 64 hex digits
};

struct model_hashes {
  std::vector<file_hash> files;  ///< sorted by name
  std::string weights_hash;
  std::string tokenizer_hash;  ///< "" when there is no tokenizer.json
};

/// SHA-256 of bytes, as 64 hex digits.
std::string sha256_hex(std::string_view bytes);
/// SHA-256 of a file's contents, or an error naming the file.
std::variant<std::string, std::string> sha256_file(const std::string& path);
/// A weights URI as a local directory: "file:///abs/dir" or a path ("~/" is $HOME); an error
/// for any other scheme (http:// weights are pulled: config/artifact_pull.hpp).
std::variant<std::string, std::string> local_dir_of(const std::string& uri);
/// Whether a file of a model directory is hashed (config.json, *.safetensors, tokenizer files).
bool is_hashed_file(const std::string& name);
/// The hashes of a model directory from its files' SHA-256 (others are ignored), as
/// hash_model_dir computes them; an error naming `where` when there are no weights.
std::variant<model_hashes, std::string> hashes_of(std::vector<file_hash> files, const std::string& where);
/// Hashes a model directory; an error when it is missing or holds no weights.
std::variant<model_hashes, std::string> hash_model_dir(const std::string& dir);
/// "" when every recorded file still has its hash; otherwise which file differs or is gone.
std::string verify_model_dir(const std::string& dir, const std::vector<file_hash>& recorded);

}  // namespace kiln::config
