#pragma once
// The parsed form of a template (internal to engine/jinja/).
#include <memory>
#include <string>
#include <vector>

#include "engine/jinja/value.hpp"

namespace kiln::engine::jinja {

struct expr;
using expr_ptr = std::shared_ptr<expr>;

struct expr {
  enum class op {
    literal, name, attr, index, slice, call, filter, test, unary_not, unary_minus, binary, cond, make_list, make_dict
  };
  op kind = op::literal;
  value lit;                   // literal
  std::string name;            // name, attr, call/filter/test name, binary operator
  std::vector<expr_ptr> args;  // operands / call arguments (object first for methods and filters)
  std::vector<std::pair<std::string, expr_ptr>> kwargs;
  bool negate = false;         // "is not"
};

struct node;
using node_ptr = std::shared_ptr<node>;
using body = std::vector<node_ptr>;

struct node {
  enum class type { text, output, if_, for_, set, break_, continue_ };
  type kind = type::text;
  std::string text;                                  // text
  expr_ptr e;                                        // output, set value, for iterable
  std::vector<std::pair<expr_ptr, body>> branches;   // if / elif ... (condition null: else)
  std::vector<std::string> targets;                  // for loop variables; set target (a or ns.attr)
  expr_ptr filter;                                   // for ... if filter
  body inner, otherwise;                             // for body, for-else
};

}  // namespace kiln::engine::jinja
