#pragma once
// multipart/form-data bodies (RFC 7578), as the OpenAI SDK uploads files: the boundary from
// the Content-Type header, then each part's name, filename and bytes.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::net {

struct form_part {
  std::string name;
  std::string filename;  ///< "" for a plain field
  std::string content_type;
  std::string_view data;  ///< into the body
};

/// The boundary a multipart/form-data Content-Type names ("" when it is not one or has none).
std::string form_boundary(std::string_view content_type);
/// The parts of `body` (which must outlive them), or why it is not a well-formed form.
std::variant<std::vector<form_part>, std::string> parse_form(std::string_view body, std::string_view boundary);

}  // namespace kiln::net
