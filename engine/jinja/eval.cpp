// Rendering: expressions, filters, tests, methods and statements over scoped variables.
#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "engine/jinja/jinja.hpp"
#include "engine/unicode_text.hpp"

namespace kiln::engine::jinja {

namespace {

struct render_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// {% break %} and {% continue %} unwind to their loop.
struct loop_break {};
struct loop_continue {};

constexpr std::size_t kMaxOutput = 16 << 20;
constexpr std::size_t kMaxSteps = 5'000'000;

std::string repr(const value& v) {
  if (v.k == value::kind::string) {
    std::string out = "'";
    for (char c : v.s) out += c == '\'' ? std::string("\\'") : std::string(1, c);
    return out + "'";
  }
  return v.str();
}

// Python's json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson calls it:
// ", " and ": " between items without an indent; a newline and `indent` spaces per level with.
void json_into(std::string& out, const value& v, int indent, int level) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(indent * lvl), ' ');
  };
  switch (v.k) {
    case value::kind::undefined:
    case value::kind::none: out += "null"; return;
    case value::kind::boolean: out += v.b ? "true" : "false"; return;
    case value::kind::integer: out += std::to_string(v.i); return;
    case value::kind::number: out += v.str(); return;
    case value::kind::string: {
      out += '"';
      for (unsigned char c : v.s) {
        switch (c) {
          case '"': out += "\\\""; break;
          case '\\': out += "\\\\"; break;
          case '\n': out += "\\n"; break;
          case '\r': out += "\\r"; break;
          case '\t': out += "\\t"; break;
          case '\b': out += "\\b"; break;
          case '\f': out += "\\f"; break;
          default:
            if (c < 0x20) {
              char b[8];
              std::snprintf(b, sizeof b, "\\u%04x", c);
              out += b;
            } else {
              out += static_cast<char>(c);
            }
        }
      }
      out += '"';
      return;
    }
    case value::kind::list: {
      if (v.l->empty()) { out += "[]"; return; }
      out += '[';
      for (std::size_t i = 0; i < v.l->size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(level + 1);
        json_into(out, (*v.l)[i], indent, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case value::kind::dict: {
      if (v.m->empty()) { out += "{}"; return; }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : *v.m) {
        if (!first) out += indent < 0 ? ", " : ",";
        first = false;
        newline(level + 1);
        json_into(out, value(k), indent, level + 1);
        out += ": ";
        json_into(out, x, indent, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
  }
}

std::string json_of(const value& v, int indent = -1) {
  std::string out;
  json_into(out, v, indent, 0);
  return out;
}

std::string strip(const std::string& s, bool left, bool right, const std::string& chars = " \t\n\r\f\v") {
  std::size_t b = 0, e = s.size();
  if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

double num(const value& v) {
  if (v.k == value::kind::integer) return static_cast<double>(v.i);
  if (v.k == value::kind::number) return v.d;
  if (v.k == value::kind::boolean) return v.b;
  throw render_error("expected a number, got " + repr(v));
}

// Byte offsets where each UTF-8 character starts, and the end.
std::vector<std::size_t> char_starts(const std::string& s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  out.push_back(s.size());
  return out;
}

std::int64_t length(const value& v) {
  switch (v.k) {
    case value::kind::string: return static_cast<std::int64_t>(char_starts(v.s).size()) - 1;
    case value::kind::list: return static_cast<std::int64_t>(v.l->size());
    case value::kind::dict: return static_cast<std::int64_t>(v.m->size());
    default: throw render_error("object of this type has no length: " + repr(v));
  }
}

list items_of(const value& v) {
  list out;
  if (v.k == value::kind::list) return *v.l;
  if (v.k == value::kind::dict)
    for (const auto& [k, x] : *v.m) out.push_back(value(k));
  else if (v.k == value::kind::string)
    for (char c : v.s) out.push_back(value(std::string(1, c)));
  else if (v.defined() && v.k != value::kind::none)
    throw render_error(repr(v) + " is not iterable");
  return out;
}

bool contains(const value& hay, const value& needle) {
  if (hay.k == value::kind::string) return needle.k == value::kind::string && hay.s.find(needle.s) != std::string::npos;
  if (hay.k == value::kind::dict) return needle.k == value::kind::string && hay.m->count(needle.s);
  if (hay.k == value::kind::list) return std::find(hay.l->begin(), hay.l->end(), needle) != hay.l->end();
  return false;
}

class renderer {
 public:
  renderer(const dict& globals, std::time_t now) : now_(now) { scopes_.push_back(globals); }

  void run(const body& b) {
    for (const auto& n : b) exec(*n);
  }
  std::string out;

 private:
  void tick() {
    if (++steps_ > kMaxSteps) throw render_error("template ran too long");
    if (out.size() > kMaxOutput) throw render_error("template output too large");
  }

  value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return f->second;
    return {};
  }

  void exec(const node& n) {
    tick();
    switch (n.kind) {
      case node::type::text: out += n.text; break;
      case node::type::output: {
        const value v = eval(*n.e);
        if (v.defined()) out += v.str();
        break;
      }
      case node::type::if_:
        for (const auto& [cond, b] : n.branches)
          if (!cond || eval(*cond).truthy()) {
            run(b);
            break;
          }
        break;
      case node::type::for_: exec_for(n); break;
      case node::type::break_: throw loop_break{};
      case node::type::continue_: throw loop_continue{};
      case node::type::set: {
        const value v = eval(*n.e);
        const std::string& target = n.targets[0];
        if (const auto dot = target.find('.'); dot != std::string::npos) {
          value ns = lookup(target.substr(0, dot));
          if (ns.k != value::kind::dict) throw render_error("cannot set an attribute of " + target.substr(0, dot));
          (*ns.m)[target.substr(dot + 1)] = v;  // namespaces are shared: visible outside loops
        } else {
          scopes_.back()[target] = v;
        }
        break;
      }
    }
  }

  void exec_for(const node& n) {
    list items = items_of(eval(*n.e));
    if (n.filter) {
      list kept;
      for (auto& item : items) {
        scopes_.push_back({});
        bind(n, item);
        const bool keep = eval(*n.filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return run(n.otherwise);
    const auto len = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < len; ++i) {
      scopes_.push_back({});
      bind(n, items[static_cast<std::size_t>(i)]);
      dict loop{{"index0", value(i)}, {"index", value(i + 1)}, {"first", value(i == 0)}, {"last", value(i == len - 1)},
                {"length", value(len)}, {"revindex", value(len - i)}, {"revindex0", value(len - i - 1)}};
      if (i > 0) loop["previtem"] = items[static_cast<std::size_t>(i - 1)];
      if (i + 1 < len) loop["nextitem"] = items[static_cast<std::size_t>(i + 1)];
      scopes_.back()["loop"] = value(std::move(loop));
      bool stop = false;
      try {
        run(n.inner);
      } catch (const loop_continue&) {
      } catch (const loop_break&) {
        stop = true;
      }
      scopes_.pop_back();
      if (stop) break;
    }
  }

  void bind(const node& n, const value& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    if (item.k != value::kind::list || item.l->size() != n.targets.size())
      throw render_error("cannot unpack " + repr(item) + " into " + std::to_string(n.targets.size()) + " names");
    for (std::size_t i = 0; i < n.targets.size(); ++i) scopes_.back()[n.targets[i]] = (*item.l)[i];
  }

  value eval(const expr& e) {
    tick();
    switch (e.kind) {
      case expr::op::literal: return e.lit;
      case expr::op::name: return lookup(e.name);
      case expr::op::attr: {
        const value obj = eval(*e.args[0]);
        if (obj.k == value::kind::dict)
          if (auto it = obj.m->find(e.name); it != obj.m->end()) return it->second;
        return {};
      }
      case expr::op::index: return index(eval(*e.args[0]), eval(*e.args[1]));
      case expr::op::slice:
        return slice(eval(*e.args[0]), e.args[1] ? eval(*e.args[1]) : value(), e.args[2] ? eval(*e.args[2]) : value(),
                     e.args[3] ? eval(*e.args[3]) : value());
      case expr::op::call: return call(e);
      case expr::op::filter: return filter(e);
      case expr::op::test: return value(test(e) != e.negate);
      case expr::op::unary_not: return value(!eval(*e.args[0]).truthy());
      case expr::op::unary_minus: {
        const value v = eval(*e.args[0]);
        return v.k == value::kind::integer ? value(-v.i) : value(-num(v));
      }
      case expr::op::cond: return eval(*e.args[0]).truthy() ? eval(*e.args[1]) : (e.args.size() > 2 ? eval(*e.args[2]) : value());
      case expr::op::make_list: {
        list l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return value(std::move(l));
      }
      case expr::op::make_dict: {
        dict d;
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) d[eval(*e.args[i]).str()] = eval(*e.args[i + 1]);
        return value(std::move(d));
      }
      case expr::op::binary: return binary(e);
    }
    return {};
  }

  value index(const value& obj, const value& key) {
    if (obj.k == value::kind::dict) {
      if (auto it = obj.m->find(key.str()); it != obj.m->end()) return it->second;
      return {};
    }
    if ((obj.k == value::kind::list || obj.k == value::kind::string) && key.k == value::kind::integer) {
      const std::int64_t n = length(obj);
      const std::int64_t i = key.i < 0 ? key.i + n : key.i;
      if (i < 0 || i >= n) return {};
      if (obj.k == value::kind::list) return (*obj.l)[static_cast<std::size_t>(i)];
      const auto cuts = char_starts(obj.s);
      return value(obj.s.substr(cuts[static_cast<std::size_t>(i)], cuts[static_cast<std::size_t>(i) + 1] - cuts[static_cast<std::size_t>(i)]));
    }
    return {};
  }

  // Python's obj[lo:hi:step] on a list or a string (by characters, not bytes).
  value slice(const value& obj, const value& lo, const value& hi, const value& step_v) {
    const auto given = [](const value& v) { return v.defined() && v.k != value::kind::none; };
    const std::int64_t step = given(step_v) ? static_cast<std::int64_t>(num(step_v)) : 1;
    if (step == 0) throw render_error("slice step cannot be zero");
    const std::vector<std::size_t> cuts = obj.k == value::kind::string ? char_starts(obj.s) : std::vector<std::size_t>{};
    const std::int64_t n = obj.k == value::kind::string ? static_cast<std::int64_t>(cuts.size()) - 1 : length(obj);
    // Python's PySlice_AdjustIndices: negative from the end, then clamped by the step's sign.
    auto bound = [&](const value& v, std::int64_t dflt) {
      if (!given(v)) return dflt;
      std::int64_t x = static_cast<std::int64_t>(num(v));
      if (x < 0) x += n;
      return step > 0 ? std::clamp<std::int64_t>(x, 0, n) : std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t b = bound(lo, step > 0 ? 0 : n - 1), end = bound(hi, step > 0 ? n : -1);
    list items;
    std::string text;
    for (std::int64_t i = b; step > 0 ? i < end : i > end; i += step) {
      if (obj.k == value::kind::string) text += obj.s.substr(cuts[static_cast<std::size_t>(i)], cuts[static_cast<std::size_t>(i) + 1] - cuts[static_cast<std::size_t>(i)]);
      else items.push_back((*obj.l)[static_cast<std::size_t>(i)]);
    }
    if (obj.k == value::kind::string) return value(std::move(text));
    return value(std::move(items));
  }

  value binary(const expr& e) {
    const std::string& o = e.name;
    if (o == "and") {
      value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    if (o == "or") {
      value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    const value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (o == "==") return value(a == b);
    if (o == "!=") return value(!(a == b));
    if (o == "in") return value(contains(b, a));
    if (o == "~") return value((a.defined() ? a.str() : "") + (b.defined() ? b.str() : ""));
    if (o == "+") {
      if (a.k == value::kind::string && b.k == value::kind::string) return value(a.s + b.s);
      if (a.k == value::kind::list && b.k == value::kind::list) {
        list l = *a.l;
        l.insert(l.end(), b.l->begin(), b.l->end());
        return value(std::move(l));
      }
      if (a.k == value::kind::string || b.k == value::kind::string)
        throw render_error("cannot add " + repr(a) + " and " + repr(b));
    }
    if (o == "<" || o == ">" || o == "<=" || o == ">=") {
      const bool lt = a.k == value::kind::string && b.k == value::kind::string ? a.s < b.s : num(a) < num(b);
      const bool gt = a.k == value::kind::string && b.k == value::kind::string ? a.s > b.s : num(a) > num(b);
      return value(o == "<" ? lt : o == ">" ? gt : o == "<=" ? !gt : !lt);
    }
    const bool ints = a.k == value::kind::integer && b.k == value::kind::integer;
    if (o == "+") return ints ? value(a.i + b.i) : value(num(a) + num(b));
    if (o == "-") return ints ? value(a.i - b.i) : value(num(a) - num(b));
    if (o == "*") {
      if (a.k == value::kind::string && b.k == value::kind::integer) {
        std::string s;
        for (std::int64_t i = 0; i < b.i && s.size() < kMaxOutput; ++i) s += a.s;
        return value(s);
      }
      return ints ? value(a.i * b.i) : value(num(a) * num(b));
    }
    if (o == "/") {
      if (num(b) == 0) throw render_error("division by zero");
      return value(num(a) / num(b));
    }
    if (o == "//" || o == "%") {
      if (num(b) == 0) throw render_error("division by zero");
      if (ints) {
        const std::int64_t q = a.i / b.i - ((a.i % b.i != 0) && ((a.i < 0) != (b.i < 0)));
        return o == "//" ? value(q) : value(a.i - q * b.i);
      }
      const double q = std::floor(num(a) / num(b));
      return o == "//" ? value(q) : value(num(a) - q * num(b));
    }
    throw render_error("unknown operator " + o);
  }

  std::vector<value> args_of(const expr& e, std::size_t from) {
    std::vector<value> out;
    for (std::size_t i = from; i < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
    return out;
  }

  value call(const expr& e) {
    const expr& callee = *e.args[0];
    const std::vector<value> a = args_of(e, 1);
    if (callee.kind == expr::op::name) {
      if (callee.name == "raise_exception") throw render_error(a.empty() ? "raise_exception" : a[0].str());
      if (callee.name == "strftime_now") {
        std::tm tm{};
        gmtime_r(&now_, &tm);
        char buf[256];
        const std::size_t n = a.empty() ? 0 : std::strftime(buf, sizeof buf, a[0].str().c_str(), &tm);
        return value(std::string(buf, n));
      }
      if (callee.name == "namespace") {
        dict d;
        for (const auto& [k, v] : e.kwargs) d[k] = eval(*v);
        return value(std::move(d));
      }
      if (callee.name == "range") {
        std::int64_t lo = 0, hi = a.empty() ? 0 : static_cast<std::int64_t>(num(a[0]));
        if (a.size() > 1) {
          lo = hi;
          hi = static_cast<std::int64_t>(num(a[1]));
        }
        if (hi - lo > 1'000'000) throw render_error("range too large");
        list l;
        for (std::int64_t i = lo; i < hi; ++i) l.push_back(value(i));
        return value(std::move(l));
      }
      throw render_error("unknown function " + callee.name);
    }
    if (callee.kind != expr::op::attr) throw render_error("this value cannot be called");
    const value obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (obj.k == value::kind::string) {
      const std::string& s = obj.s;
      // Python's strip family: Unicode whitespace by default, else any of the given characters.
      const bool ws = a.empty() || a[0].k == value::kind::none;
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const bool left = m != "rstrip", right = m != "lstrip";
        return value(ws ? strip_python_space(s, left, right) : strip(s, left, right, a[0].str()));
      }
      if (m == "upper" || m == "lower") return value(python_case(s, m == "upper"));
      if (m == "startswith") return value(!a.empty() && s.rfind(a[0].str(), 0) == 0);
      if (m == "endswith") return value(!a.empty() && s.size() >= a[0].str().size() && s.compare(s.size() - a[0].str().size(), std::string::npos, a[0].str()) == 0);
      if (m == "replace" && a.size() >= 2) return value(replace_all(s, a[0].str(), a[1].str()));
      if (m == "split") {
        list parts;
        const std::string sep = a.empty() ? " " : a[0].str();
        std::size_t start = 0, pos;
        while (!sep.empty() && (pos = s.find(sep, start)) != std::string::npos) {
          parts.push_back(value(s.substr(start, pos - start)));
          start = pos + sep.size();
        }
        parts.push_back(value(s.substr(start)));
        return value(std::move(parts));
      }
    }
    if (obj.k == value::kind::dict) {
      if (m == "items") {
        list l;
        for (const auto& [k, v] : *obj.m) l.push_back(value(list{value(k), v}));
        return value(std::move(l));
      }
      if (m == "keys" || m == "values") {
        list l;
        for (const auto& [k, v] : *obj.m) l.push_back(m == "keys" ? value(k) : v);
        return value(std::move(l));
      }
      if (m == "get") {
        if (!a.empty())
          if (auto it = obj.m->find(a[0].str()); it != obj.m->end()) return it->second;
        return a.size() > 1 ? a[1] : value::none();
      }
    }
    throw render_error("unknown method " + m);
  }

  static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
      s.replace(pos, from.size(), to);
      pos += to.size();
    }
    return s;
  }

  value filter(const expr& e) {
    const value v = eval(*e.args[0]);
    const std::vector<value> a = args_of(e, 1);
    const std::string& f = e.name;
    if (f == "trim") return value(a.empty() ? strip_python_space(v.str(), true, true) : strip(v.str(), true, true, a[0].str()));
    if (f == "length" || f == "count") return value(length(v));
    if (f == "lower" || f == "upper") return value(python_case(v.str(), f == "upper"));
    if (f == "capitalize" || f == "title") {
      std::string r = v.str();
      bool start = true;
      for (auto& c : r) {
        c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : (f == "capitalize" ? std::tolower(static_cast<unsigned char>(c)) : c));
        start = f == "title" ? std::isspace(static_cast<unsigned char>(c)) != 0 : false;
      }
      return value(r);
    }
    if (f == "first" || f == "last") {
      const list l = items_of(v);
      if (l.empty()) return {};
      return f == "first" ? l.front() : l.back();
    }
    if (f == "join") {
      std::string r;
      const list l = items_of(v);
      for (std::size_t i = 0; i < l.size(); ++i) r += (i && !a.empty() ? a[0].str() : "") + l[i].str();
      return value(r);
    }
    if (f == "default" || f == "d") {
      const bool boolean = a.size() > 1 && a[1].truthy();
      if (!v.defined() || (boolean && !v.truthy())) return a.empty() ? value("") : a[0];
      return v;
    }
    if (f == "string") return value(v.str());
    if (f == "int") return value(static_cast<std::int64_t>(v.k == value::kind::string ? std::atoll(v.s.c_str()) : num(v)));
    if (f == "tojson") {
      int indent = a.empty() || a[0].k == value::kind::none ? -1 : static_cast<int>(num(a[0]));
      for (const auto& [k, x] : e.kwargs)
        if (k == "indent") {
          const value iv = eval(*x);
          indent = iv.k == value::kind::none ? -1 : static_cast<int>(num(iv));
        }
      return value(json_of(v, indent));
    }
    if (f == "list") return value(items_of(v));
    if (f == "select" || f == "reject") return select(v, a, f == "select", false);
    if (f == "selectattr" || f == "rejectattr") return select(v, a, f == "selectattr", true);
    if (f == "map") {
      list out;
      for (const auto& [k, x] : e.kwargs) {
        if (k != "attribute") continue;
        const std::string attr = eval(*x).str();
        for (const value& item : items_of(v)) {
          value got;
          if (item.k == value::kind::dict)
            if (auto it = item.m->find(attr); it != item.m->end()) got = it->second;
          out.push_back(got);
        }
        return value(std::move(out));
      }
      throw render_error("map needs attribute=");
    }
    if (f == "reverse") {
      if (v.k == value::kind::string) return value(std::string(v.s.rbegin(), v.s.rend()));
      list l = items_of(v);
      std::reverse(l.begin(), l.end());
      return value(std::move(l));
    }
    if (f == "replace" && a.size() >= 2) return value(replace_all(v.str(), a[0].str(), a[1].str()));
    if (f == "safe" || f == "e" || f == "escape") return v;
    if (f == "items" && v.k == value::kind::dict) {
      list l;
      for (const auto& [k, x] : *v.m) l.push_back(value(list{value(k), x}));
      return value(std::move(l));
    }
    throw render_error("unknown filter " + f);
  }

  bool test(const expr& e) { return test_named(e.name, eval(*e.args[0]), args_of(e, 1)); }

  static bool test_named(const std::string& t, const value& v, const std::vector<value>& a) {
    if (t == "defined") return v.defined();
    if (t == "undefined") return !v.defined();
    if (t == "none") return v.k == value::kind::none;
    if (t == "string") return v.k == value::kind::string;
    if (t == "number") return v.k == value::kind::integer || v.k == value::kind::number;
    if (t == "integer") return v.k == value::kind::integer;
    if (t == "float") return v.k == value::kind::number;
    if (t == "boolean") return v.k == value::kind::boolean;
    if (t == "mapping") return v.k == value::kind::dict;
    if (t == "sequence" || t == "iterable") return v.k == value::kind::list || v.k == value::kind::string || (t == "iterable" && v.k == value::kind::dict);
    if (t == "true") return v.k == value::kind::boolean && v.b;
    if (t == "false") return v.k == value::kind::boolean && !v.b;
    if (t == "odd" || t == "even") return (static_cast<std::int64_t>(num(v)) % 2 != 0) == (t == "odd");
    if (t == "eq" || t == "equalto" || t == "==" || t == "sameas") return !a.empty() && v == a[0];
    if (t == "ne" || t == "!=") return !a.empty() && !(v == a[0]);
    if (t == "in") return !a.empty() && contains(a[0], v);
    throw render_error("unknown test " + t);
  }

  // select / reject (items by a test, or by truth) and selectattr / rejectattr (the same on
  // an attribute of each item), as Jinja's: a missing attribute is undefined.
  value select(const value& v, const std::vector<value>& a, bool keep, bool by_attr) {
    std::size_t at = 0;
    std::string attr;
    if (by_attr) {
      if (a.empty()) throw render_error("selectattr needs an attribute name");
      attr = a[at++].str();
    }
    const std::string name = at < a.size() ? a[at++].str() : std::string();
    const std::vector<value> rest(a.begin() + static_cast<std::ptrdiff_t>(at), a.end());
    list out;
    for (const value& item : items_of(v)) {
      value x = item;
      if (by_attr) {
        x = value();
        if (item.k == value::kind::dict)
          if (auto it = item.m->find(attr); it != item.m->end()) x = it->second;
      }
      if ((name.empty() ? x.truthy() : test_named(name, x, rest)) == keep) out.push_back(item);
    }
    return value(std::move(out));
  }

  std::vector<dict> scopes_;
  std::size_t steps_ = 0;
  std::time_t now_;
};

}  // namespace

bool value::truthy() const {
  switch (k) {
    case kind::undefined:
    case kind::none: return false;
    case kind::boolean: return b;
    case kind::integer: return i != 0;
    case kind::number: return d != 0;
    case kind::string: return !s.empty();
    case kind::list: return !l->empty();
    case kind::dict: return !m->empty();
  }
  return false;
}

std::string value::str() const {
  switch (k) {
    case kind::undefined: return "";
    case kind::none: return "None";
    case kind::boolean: return b ? "True" : "False";
    case kind::integer: return std::to_string(i);
    case kind::number: {  // Python's repr: the shortest text that reads back the same
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, d);
      std::string s(buf, r.ptr);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    case kind::string: return s;
    case kind::list: {
      std::string out = "[";
      for (std::size_t x = 0; x < l->size(); ++x) out += (x ? ", " : "") + repr((*l)[x]);
      return out + "]";
    }
    case kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, v] : *m) {
        out += (first ? "'" : ", '") + key + "': " + repr(v);
        first = false;
      }
      return out + "}";
    }
  }
  return "";
}

bool operator==(const value& a, const value& b) {
  const bool an = a.k == value::kind::integer || a.k == value::kind::number || a.k == value::kind::boolean;
  const bool bn = b.k == value::kind::integer || b.k == value::kind::number || b.k == value::kind::boolean;
  if (an && bn) return num(a) == num(b);
  if (a.k != b.k) return (a.k == value::kind::none || a.k == value::kind::undefined) && (b.k == value::kind::none || b.k == value::kind::undefined) && a.k == b.k;
  switch (a.k) {
    case value::kind::string: return a.s == b.s;
    case value::kind::list: return *a.l == *b.l;
    case value::kind::dict: return *a.m == *b.m;
    default: return true;
  }
}

std::variant<std::string, template_error> program::render(const dict& context, std::time_t now) const {
  try {
    renderer r(context, now);
    r.run(root_);
    return std::move(r.out);
  } catch (const render_error& e) {
    return template_error{e.what()};
  } catch (const loop_break&) {
    return template_error{"'break' outside a loop"};
  } catch (const loop_continue&) {
    return template_error{"'continue' outside a loop"};
  }
}

}  // namespace kiln::engine::jinja
