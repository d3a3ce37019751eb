#pragma once
// Values of kiln's Jinja subset: none, bool, int, float, string, list, map (shared, so a
// namespace() can be changed from inside a loop), and undefined.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace kiln::engine::jinja {

struct value;
using list = std::vector<value>;

/// A mapping that keeps its keys in insertion order, as Python's dict does (tojson and
/// items() print them in that order). Templates hold few keys: lookups are linear.
class dict {
 public:
  using item = std::pair<std::string, value>;
  using iterator = std::vector<item>::iterator;
  using const_iterator = std::vector<item>::const_iterator;

  dict() = default;
  dict(std::initializer_list<item> init);
  value& operator[](const std::string& key);
  iterator find(const std::string& key);
  const_iterator find(const std::string& key) const;
  std::size_t count(const std::string& key) const;
  iterator begin();
  iterator end();
  const_iterator begin() const;
  const_iterator end() const;
  std::size_t size() const;
  bool empty() const;
  /// Equal as Python's dicts are: the same keys with equal values, in any order.
  bool operator==(const dict& other) const;

 private:
  std::vector<item> items_;
};

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

inline dict::iterator dict::begin() { return items_.begin(); }
inline dict::iterator dict::end() { return items_.end(); }
inline dict::const_iterator dict::begin() const { return items_.begin(); }
inline dict::const_iterator dict::end() const { return items_.end(); }
inline std::size_t dict::size() const { return items_.size(); }
inline bool dict::empty() const { return items_.empty(); }
inline std::size_t dict::count(const std::string& key) const { return find(key) == end() ? 0 : 1; }
inline dict::dict(std::initializer_list<item> init) {
  for (const auto& [k, v] : init) (*this)[k] = v;
}
inline dict::iterator dict::find(const std::string& key) {
  for (auto it = items_.begin(); it != items_.end(); ++it)
    if (it->first == key) return it;
  return items_.end();
}
inline dict::const_iterator dict::find(const std::string& key) const {
  for (auto it = items_.begin(); it != items_.end(); ++it)
    if (it->first == key) return it;
  return items_.end();
}
inline value& dict::operator[](const std::string& key) {
  if (auto it = find(key); it != end()) return it->second;
  items_.emplace_back(key, value());
  return items_.back().second;
}
inline bool dict::operator==(const dict& other) const {
  if (size() != other.size()) return false;
  for (const auto& [k, v] : items_) {
    auto it = other.find(k);
    if (it == other.end() || !(it->second == v)) return false;
  }
  return true;
}

}  // namespace kiln::engine::jinja
