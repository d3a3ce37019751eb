// Template text -> AST: segments with whitespace control, then recursive descent.
#include <cctype>
#include <stdexcept>

#include "engine/jinja/jinja.hpp"

namespace kiln::engine::jinja {

namespace {

struct syntax_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr int kMaxDepth = 128;

// ---- segments ----
struct segment {
  enum class kind { text, output, statement } k;
  std::string body;
  int line = 1;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }


// Where a tag's `close` ("}}" or "%}") is, from `from`, skipping string literals: Jinja
// reads `{{ "}}" }}` as one expression.
std::size_t find_close(std::string_view t, std::size_t from, std::string_view close) {
  for (std::size_t i = from; i < t.size(); ++i) {
    if (t.compare(i, close.size(), close) == 0) return i;
    if (t[i] != '"' && t[i] != '\'') continue;
    const char quote = t[i];
    for (++i; i < t.size() && t[i] != quote; ++i)
      if (t[i] == '\\') ++i;
    if (i >= t.size()) return t.find(close, from);  // the lexer reports the unterminated string
  }
  return std::string_view::npos;
}

std::vector<segment> segments(std::string_view t) {
  std::vector<segment> out;
  std::size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // "-%}" before: strip leading whitespace of the next text
  bool trim_newline = false;  // trim_blocks: drop one newline after a block tag
  auto line_at = [&](std::size_t p) {
    for (std::size_t i = pos; i < p && i < t.size(); ++i) line += t[i] == '\n';
  };
  while (pos <= t.size()) {
    std::size_t open = t.find('{', pos);
    while (open != std::string_view::npos && open + 1 < t.size() && t[open + 1] != '{' && t[open + 1] != '%' && t[open + 1] != '#')
      open = t.find('{', open + 1);
    if (open + 1 >= t.size()) open = std::string_view::npos;
    std::string text(t.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos));
    std::size_t text_start = pos;  // where `text` begins in the source, after any trimming
    if (strip_next) {
      std::size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
      text_start += k;
    } else if (trim_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
      ++text_start;
    } else if (trim_newline && text.size() > 1 && text[0] == '\r' && text[1] == '\n') {
      text.erase(0, 2);
      text_start += 2;
    }
    strip_next = trim_newline = false;
    if (open == std::string_view::npos) {
      if (!text.empty()) out.push_back({segment::kind::text, text, line});
      break;
    }
    const char type = t[open + 1];
    const bool minus_open = open + 2 < t.size() && t[open + 2] == '-';
    const bool plus_open = open + 2 < t.size() && t[open + 2] == '+';
    if (minus_open) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (type != '{' && !plus_open) {
      // lstrip_blocks: spaces and tabs between a line start and a block tag go.
      std::size_t k = text.size();
      while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t')) --k;
      const bool line_start = k > 0 ? text[k - 1] == '\n' : (text_start == 0 || t[text_start - 1] == '\n');
      if (line_start) text.erase(k);
    }
    if (!text.empty()) out.push_back({segment::kind::text, text, line});
    line_at(open);
    pos = open;
    const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    std::size_t end = type == '#' ? t.find(close, open + 2) : find_close(t, open + 2, close);
    if (end == std::string_view::npos) throw syntax_error("line " + std::to_string(line) + ": unclosed tag");
    std::size_t inner_begin = open + 2 + (minus_open || plus_open ? 1 : 0);
    std::size_t inner_end = end;
    if (inner_end > inner_begin && t[inner_end - 1] == '-') {
      --inner_end;
      strip_next = true;
    }
    if (type != '{') trim_newline = !strip_next;
    if (type != '#') {
      out.push_back({type == '{' ? segment::kind::output : segment::kind::statement,
                     std::string(t.substr(inner_begin, inner_end - inner_begin)), line});
    }
    line_at(end + 2);
    pos = end + 2;
  }
  return out;
}

// ---- expression tokens ----
struct token {
  enum class kind { name, string, integer, number, op, end } k = kind::end;
  std::string text;
  std::int64_t i = 0;
  double d = 0;
};

std::vector<token> lex(const std::string& s, int line) {
  std::vector<token> out;
  std::size_t i = 0;
  auto fail = [&](const std::string& m) { throw syntax_error("line " + std::to_string(line) + ": " + m); };
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({token::kind::name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool frac = j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]));
      if (frac) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      // An exponent (1e20, 2.5e-7) makes it a float, as in Python.
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          j = k;
          frac = true;
        }
      }
      token tk{frac ? token::kind::number : token::kind::integer, s.substr(i, j - i)};
      try {
        if (frac) tk.d = std::stod(tk.text);
        else tk.i = std::stoll(tk.text);
      } catch (const std::exception&) {
        fail("bad number " + tk.text);
      }
      out.push_back(tk);
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) fail("unterminated string");
      out.push_back({token::kind::string, v});
      i = j + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                                  "(", ")", "[", "]", "{", "}", ",", ":", ".", "|", "="};
      bool found = false;
      for (const char* op : ops) {
        const std::size_t n = std::char_traits<char>::length(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({token::kind::op, op});
          i += n;
          found = true;
          break;
        }
      }
      if (!found) fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({});
  return out;
}

// ---- expressions ----
class expr_parser {
 public:
  expr_parser(std::vector<token> toks, int line) : t_(std::move(toks)), line_(line) {}

  expr_ptr expression() {
    expr_ptr e = or_expr();
    if (is_name("if")) {
      ++p_;
      auto c = std::make_shared<expr>();
      c->kind = expr::op::cond;
      c->args = {or_expr(), e};
      if (is_name("else")) {
        ++p_;
        c->args.push_back(expression());
      }
      return c;
    }
    return e;
  }
  bool done() const { return t_[p_].k == token::kind::end; }
  const token& peek() const { return t_[p_]; }
  bool is_name(const char* n) const { return t_[p_].k == token::kind::name && t_[p_].text == n; }
  bool is_op(const char* o) const { return t_[p_].k == token::kind::op && t_[p_].text == o; }
  void expect_op(const char* o) {
    if (!is_op(o)) fail(std::string("expected '") + o + "'");
    ++p_;
  }
  std::string name() {
    if (t_[p_].k != token::kind::name) fail("expected a name");
    return t_[p_++].text;
  }
  [[noreturn]] void fail(const std::string& m) const {
    throw syntax_error("line " + std::to_string(line_) + ": " + m + (done() ? " at the end" : " near '" + t_[p_].text + "'"));
  }

 private:
  expr_ptr make(expr::op k, std::string n, std::vector<expr_ptr> args) {
    auto e = std::make_shared<expr>();
    e->kind = k;
    e->name = std::move(n);
    e->args = std::move(args);
    return e;
  }
  expr_ptr or_expr() {
    expr_ptr e = and_expr();
    while (is_name("or")) { ++p_; e = make(expr::op::binary, "or", {e, and_expr()}); }
    return e;
  }
  expr_ptr and_expr() {
    expr_ptr e = not_expr();
    while (is_name("and")) { ++p_; e = make(expr::op::binary, "and", {e, not_expr()}); }
    return e;
  }
  expr_ptr not_expr() {
    if (is_name("not")) { ++p_; return make(expr::op::unary_not, "", {not_expr()}); }
    return compare();
  }
  expr_ptr compare() {
    expr_ptr e = additive();
    while (true) {
      if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")) {
        const std::string o = t_[p_++].text;
        e = make(expr::op::binary, o, {e, additive()});
      } else if (is_name("in")) {
        ++p_;
        e = make(expr::op::binary, "in", {e, additive()});
      } else if (is_name("not") && t_[p_ + 1].k == token::kind::name && t_[p_ + 1].text == "in") {
        p_ += 2;
        e = make(expr::op::unary_not, "", {make(expr::op::binary, "in", {e, additive()})});
      } else {
        return e;
      }
    }
  }
  expr_ptr additive() {
    expr_ptr e = concat();
    while (is_op("+") || is_op("-")) { const std::string o = t_[p_++].text; e = make(expr::op::binary, o, {e, concat()}); }
    return e;
  }
  expr_ptr concat() {
    expr_ptr e = multiplicative();
    while (is_op("~")) { ++p_; e = make(expr::op::binary, "~", {e, multiplicative()}); }
    return e;
  }
  expr_ptr multiplicative() {
    expr_ptr e = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) { const std::string o = t_[p_++].text; e = make(expr::op::binary, o, {e, unary()}); }
    return e;
  }
  expr_ptr unary() {
    if (is_op("-")) { ++p_; return make(expr::op::unary_minus, "", {unary()}); }
    if (is_op("+")) { ++p_; return unary(); }
    expr_ptr e = postfix(primary());
    while (true) {
      if (is_op("|")) {
        ++p_;
        auto f = make(expr::op::filter, name(), {e});
        if (is_op("(")) call_args(*f);
        e = postfix(f);
      } else if (is_name("is")) {
        ++p_;
        auto test = make(expr::op::test, "", {e});
        if (is_name("not")) { ++p_; test->negate = true; }
        test->name = name();
        if (is_op("(")) call_args(*test);
        else if (t_[p_].k == token::kind::string || t_[p_].k == token::kind::integer) test->args.push_back(primary());
        e = test;
      } else {
        return e;
      }
    }
  }
  void call_args(expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (t_[p_].k == token::kind::name && t_[p_ + 1].k == token::kind::op && t_[p_ + 1].text == "=") {
        std::string key = name();
        ++p_;
        call.kwargs.emplace_back(key, expression());
      } else {
        call.args.push_back(expression());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  expr_ptr postfix(expr_ptr e) {
    while (true) {
      if (is_op(".")) {
        ++p_;
        e = make(expr::op::attr, name(), {e});
      } else if (is_op("[")) {
        ++p_;
        expr_ptr lo, hi, step;
        if (!is_op(":")) lo = expression();
        if (is_op(":")) {
          ++p_;
          if (!is_op("]") && !is_op(":")) hi = expression();
          if (is_op(":")) {
            ++p_;
            if (!is_op("]")) step = expression();
          }
          e = make(expr::op::slice, "", {e, lo, hi, step});
        } else {
          e = make(expr::op::index, "", {e, lo});
        }
        expect_op("]");
      } else if (is_op("(")) {
        auto c = make(expr::op::call, "", {e});
        call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }
  expr_ptr primary() {
    const token tk = t_[p_];
    auto lit = [&](value v) {
      ++p_;
      auto e = std::make_shared<expr>();
      e->lit = std::move(v);
      return e;
    };
    switch (tk.k) {
      case token::kind::string: return lit(value(tk.text));
      case token::kind::integer: return lit(value(tk.i));
      case token::kind::number: return lit(value(tk.d));
      case token::kind::name:
        if (tk.text == "true" || tk.text == "True") return lit(value(true));
        if (tk.text == "false" || tk.text == "False") return lit(value(false));
        if (tk.text == "none" || tk.text == "None") return lit(value::none());
        ++p_;
        return make(expr::op::name, tk.text, {});
      case token::kind::op:
        if (tk.text == "(") {
          ++p_;
          expr_ptr e = expression();
          expect_op(")");
          return e;
        }
        if (tk.text == "[") {
          ++p_;
          auto l = make(expr::op::make_list, "", {});
          while (!is_op("]")) {
            l->args.push_back(expression());
            if (!is_op(",")) break;
            ++p_;
          }
          expect_op("]");
          return l;
        }
        if (tk.text == "{") {
          ++p_;
          auto d = make(expr::op::make_dict, "", {});
          while (!is_op("}")) {
            d->args.push_back(expression());
            expect_op(":");
            d->args.push_back(expression());
            if (!is_op(",")) break;
            ++p_;
          }
          expect_op("}");
          return d;
        }
        break;
      case token::kind::end: break;
    }
    fail("expected a value");
  }

  std::vector<token> t_;
  std::size_t p_ = 0;
  int line_;
};

}  // namespace

// ---- statements ----
class parser {
 public:
  explicit parser(std::vector<segment> segs) : s_(std::move(segs)) {}

  body parse_body(const std::vector<std::string>& stops, std::string& stopped, int depth) {
    if (depth > kMaxDepth) throw syntax_error("blocks nested too deeply");
    body out;
    while (i_ < s_.size()) {
      const segment& seg = s_[i_];
      if (seg.k == segment::kind::text) {
        auto n = std::make_shared<node>();
        n->text = seg.body;
        out.push_back(n);
        ++i_;
        continue;
      }
      expr_parser p(lex(seg.body, seg.line), seg.line);
      if (seg.k == segment::kind::output) {
        auto n = std::make_shared<node>();
        n->kind = node::type::output;
        n->e = p.expression();
        if (!p.done()) p.fail("unexpected text");
        out.push_back(n);
        ++i_;
        continue;
      }
      const std::string word = p.name();
      for (const auto& s : stops)
        if (word == s) {
          stopped = word;
          return out;
        }
      ++i_;
      if (word == "if") {
        auto n = std::make_shared<node>();
        n->kind = node::type::if_;
        expr_ptr cond = p.expression();
        while (true) {
          std::string how;
          body b = parse_body({"elif", "else", "endif"}, how, depth + 1);
          n->branches.emplace_back(cond, std::move(b));
          if (how.empty()) throw syntax_error("line " + std::to_string(seg.line) + ": 'if' without 'endif'");
          expr_parser q(lex(s_[i_].body, s_[i_].line), s_[i_].line);
          q.name();
          ++i_;
          if (how == "endif") break;
          cond = how == "elif" ? q.expression() : nullptr;
          if (how == "else") {
            std::string end;
            body e = parse_body({"endif"}, end, depth + 1);
            if (end.empty()) throw syntax_error("line " + std::to_string(seg.line) + ": 'if' without 'endif'");
            n->branches.emplace_back(nullptr, std::move(e));
            ++i_;
            break;
          }
        }
        out.push_back(n);
      } else if (word == "for") {
        auto n = std::make_shared<node>();
        n->kind = node::type::for_;
        n->targets.push_back(p.name());
        while (p.is_op(",")) {
          p.expect_op(",");
          n->targets.push_back(p.name());
        }
        if (!p.is_name("in")) p.fail("expected 'in'");
        p.name();
        n->e = p.expression();
        if (n->e->kind == expr::op::cond && n->e->args.size() == 2) {  // "for x in xs if cond"
          n->filter = n->e->args[0];
          n->e = n->e->args[1];
        }
        std::string how;
        n->inner = parse_body({"else", "endfor"}, how, depth + 1);
        if (how.empty()) throw syntax_error("line " + std::to_string(seg.line) + ": 'for' without 'endfor'");
        ++i_;
        if (how == "else") {
          std::string end;
          n->otherwise = parse_body({"endfor"}, end, depth + 1);
          if (end.empty()) throw syntax_error("line " + std::to_string(seg.line) + ": 'for' without 'endfor'");
          ++i_;
        }
        out.push_back(n);
      } else if (word == "set") {
        auto n = std::make_shared<node>();
        n->kind = node::type::set;
        std::string target = p.name();
        if (p.is_op(".")) {
          p.expect_op(".");
          target += "." + p.name();
        }
        n->targets.push_back(target);
        p.expect_op("=");
        n->e = p.expression();
        if (!p.done()) p.fail("unexpected text");
        out.push_back(n);
      } else if (word == "break" || word == "continue") {  // transformers enables jinja2.ext.loopcontrols
        if (!p.done()) p.fail("unexpected text");
        auto n = std::make_shared<node>();
        n->kind = word == "break" ? node::type::break_ : node::type::continue_;
        out.push_back(n);
      } else if (word == "generation" || word == "endgeneration") {
        // Markers some templates use for training masks; they render nothing.
      } else {
        throw syntax_error("line " + std::to_string(seg.line) + ": '" + word + "' is not supported");
      }
    }
    return out;
  }

  bool finished() const { return i_ >= s_.size(); }
  const segment& current() const { return s_[i_]; }

 private:
  std::vector<segment> s_;
  std::size_t i_ = 0;
};

std::variant<program, template_error> program::parse(std::string_view text) {
  try {
    parser p(segments(text));
    std::string stopped;
    program prog;
    prog.root_ = p.parse_body({}, stopped, 0);
    if (!p.finished()) throw syntax_error("line " + std::to_string(p.current().line) + ": unexpected 'end' tag");
    return prog;
  } catch (const syntax_error& e) {
    return template_error{std::string("template syntax error: ") + e.what()};
  }
}

}  // namespace kiln::engine::jinja
