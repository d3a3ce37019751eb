#pragma once
// A prompt's token ids, immutable once made and shared between copies: a request is copied at
// every hop that keeps it (its owner holds one for retries while a replica runs another), and
// a prompt of thousands of tokens is not. A list may also be named by a source that makes its
// ids when first read (the simulator's prompts): until then it holds a few words, and copy_to()
// writes the ids straight where they are wanted without keeping them.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::engine {

class token_list {
 public:
  using value_type = std::int32_t;
  using const_iterator = std::vector<value_type>::const_iterator;

  /// What makes a list's ids on demand: the same ids every time.
  class source {
   public:
    virtual ~source() = default;
    virtual std::size_t size() const = 0;
    /// Writes all size() ids at `out`.
    virtual void fill(value_type* out) const = 0;
  };

  token_list() = default;
  token_list(std::vector<value_type> v)  // NOLINT: a vector is a token list
      : p_(v.empty() ? nullptr : std::make_shared<const rep>(std::move(v))) {}
  token_list(std::initializer_list<value_type> v) : token_list(std::vector<value_type>(v)) {}
  /// A list whose ids `src` makes when first read.
  static token_list made_by(std::shared_ptr<const source> src) {
    token_list t;
    if (src && src->size() > 0) t.p_ = std::make_shared<const rep>(std::move(src));
    return t;
  }

  template <class It>
  void assign(It first, It last) {
    *this = token_list(std::vector<value_type>(first, last));
  }
  void assign(std::size_t n, value_type v) { *this = token_list(std::vector<value_type>(n, v)); }

  const std::vector<value_type>& vec() const { return p_ ? p_->ids() : empty_vec(); }
  std::size_t size() const { return p_ ? p_->size : 0; }
  bool empty() const { return size() == 0; }
  const value_type* data() const { return vec().data(); }
  const_iterator begin() const { return vec().begin(); }
  const_iterator end() const { return vec().end(); }
  value_type operator[](std::size_t i) const { return vec()[i]; }
  /// Appends the ids to `out`; a list not yet made is made there, and not kept.
  void copy_to(std::vector<value_type>& out) const {
    if (!p_) return;
    if (!p_->src) {
      out.insert(out.end(), p_->made.begin(), p_->made.end());
      return;
    }
    const std::size_t at = out.size();
    out.resize(at + p_->size);
    p_->src->fill(out.data() + at);
  }

  friend bool operator==(const token_list& a, const token_list& b) { return a.p_ == b.p_ || a.vec() == b.vec(); }

 private:
  struct rep {
    explicit rep(std::vector<value_type> v) : size(v.size()), made(std::move(v)) {}
    explicit rep(std::shared_ptr<const source> s) : size(s->size()), src(std::move(s)) {}
    const std::vector<value_type>& ids() const {
      if (src) std::call_once(once, [this] {
          made.resize(size);
          src->fill(made.data());
        });
      return made;
    }
    std::size_t size = 0;
    std::shared_ptr<const source> src;  ///< null: `made` holds the ids from the start
    mutable std::once_flag once;
    mutable std::vector<value_type> made;
  };
  static const std::vector<value_type>& empty_vec() {
    static const std::vector<value_type> none;
    return none;
  }
  std::shared_ptr<const rep> p_;
};

/// Serialized (and printed) as the plain list of ids.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_list& x) {
  if constexpr (Inspector::reads_state) {
    auto v = x.vec();
    return f(v);
  } else {
    std::vector<token_list::value_type> v;
    auto result = f(v);
    x = token_list(std::move(v));
    return result;
  }
}

}  // namespace kiln::engine
