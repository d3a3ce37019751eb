#pragma once
// Values of kiln's Jinja subset: none, bool, int, float, string, list, map (shared, so a
// namespace() can be changed from inside a loop), and undefined.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::engine::jinja {

struct value;
using list = std::vector<value>;
using dict = std::map<std::string, value>;

struct value {
  enum class kind { undefined, none, boolean, integer, number, string, list, dict };
  kind k = kind::undefined;
  bool b = false;
  std::int64_t i = 0;
  double d = 0;
  std::string s;
  std::shared_ptr<jinja::list> l;
  std::shared_ptr<jinja::dict> m;

  value() = default;
  static value none() { value v; v.k = kind::none; return v; }
  value(bool x) : k(kind::boolean), b(x) {}
  value(int x) : k(kind::integer), i(x) {}
  value(std::int64_t x) : k(kind::integer), i(x) {}
  value(double x) : k(kind::number), d(x) {}
  value(const char* x) : k(kind::string), s(x) {}
  value(std::string x) : k(kind::string), s(std::move(x)) {}
  value(jinja::list x) : k(kind::list), l(std::make_shared<jinja::list>(std::move(x))) {}
  value(jinja::dict x) : k(kind::dict), m(std::make_shared<jinja::dict>(std::move(x))) {}

  bool defined() const { return k != kind::undefined; }
  bool truthy() const;
  /// How Jinja prints it: None, True/False, numbers, strings as they are, lists as Python reprs.
  std::string str() const;
};

bool operator==(const value& a, const value& b);

}  // namespace kiln::engine::jinja
