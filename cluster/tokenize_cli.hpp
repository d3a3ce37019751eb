#pragma once
// `kiln tokenize --model-dir DIR (--chat FILE | --text TEXT | --corpus FILE) [--template FILE]
// [--json] [--now UNIX]`: a model directory's tokenizer and chat template on the command line,
// the prompt text and ids kiln would serve. A corpus file renders many texts and chats at once
// (the conformance suite compares it with Hugging Face's own implementations).
#include <ostream>
#include <string>
#include <vector>

namespace kiln::cluster {

/// 0, 1 (a file or template failed; one line on `err`) or 2 (bad arguments).
int run_tokenize(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::cluster
