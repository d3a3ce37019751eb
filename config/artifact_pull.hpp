#pragma once
// Weights over HTTP. A node with `[artifacts] dir` serves model files to the others: GET
// /artifacts/{set} lists a set's files with their sizes and SHA-256, GET
// /artifacts/{set}/{file} serves a file in byte ranges. A version whose weights_uri is
// http://host:port/artifacts/{set} is pulled into the local cache ahead of use (at its
// registration, and again before its pool loads if the copy is gone or altered), each file
// checked against the listing's SHA-256 as it arrives and the whole against the hashes the
// registry recorded; a file that does not match is not kept, and the node says why.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/model_hash.hpp"

namespace kiln::config {

struct artifact_access {
  std::string cache_dir;  ///< where pulled versions live ("~/" is $HOME)
  std::string key;        ///< the bearer key for the artifact endpoint ("": none sent)
};

struct artifact_file {
  std::string name;
  std::uint64_t bytes = 0;
  std::string sha256;
};

/// The byte range one pull request asks for.
inline constexpr std::uint64_t kPullPieceBytes = 8ull << 20;

bool is_http_uri(std::string_view uri);
/// A file or set name an artifact endpoint serves: letters, digits, '.', '_', '-', not
/// starting with '.', at most 200 characters.
bool valid_artifact_name(std::string_view name);
/// Where a version's pulled files live: <cache_dir>/<model>/<version>.
std::string pulled_dir(const artifact_access& a, const std::string& model, const std::string& version);
/// The files an artifact set lists, or why not.
std::variant<std::vector<artifact_file>, std::string> list_artifacts(const std::string& uri, const std::string& key);
/// Makes `dir` hold the set's files: those present with the listed size and SHA-256 are kept,
/// the others fetched (to a temporary name, renamed once verified). With `expect` (a
/// registered version's files), a copy that already matches is used without asking the
/// endpoint, and the result must match it. "" on success, else why.
std::string pull_weights(const std::string& uri, const std::string& dir, const std::string& key,
                         const std::vector<file_hash>& expect);

}  // namespace kiln::config
