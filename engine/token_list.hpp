#pragma once
// A prompt's token ids, immutable once made and shared between copies: a request is copied at
// every hop that keeps it (its owner holds one for retries while a replica runs another), and
// a prompt of thousands of tokens is not.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

namespace kiln::engine {

class token_list {
 public:
  using value_type = std::int32_t;
  using const_iterator = std::vector<value_type>::const_iterator;

  token_list() = default;
  token_list(std::vector<value_type> v)  // NOLINT: a vector is a token list
      : p_(v.empty() ? nullptr : std::make_shared<const std::vector<value_type>>(std::move(v))) {}
  token_list(std::initializer_list<value_type> v) : token_list(std::vector<value_type>(v)) {}

  template <class It>
  void assign(It first, It last) {
    *this = token_list(std::vector<value_type>(first, last));
  }
  void assign(std::size_t n, value_type v) { *this = token_list(std::vector<value_type>(n, v)); }

  const std::vector<value_type>& vec() const { return p_ ? *p_ : empty_vec(); }
  std::size_t size() const { return p_ ? p_->size() : 0; }
  bool empty() const { return size() == 0; }
  const value_type* data() const { return vec().data(); }
  const_iterator begin() const { return vec().begin(); }
  const_iterator end() const { return vec().end(); }
  value_type operator[](std::size_t i) const { return (*p_)[i]; }

  friend bool operator==(const token_list& a, const token_list& b) { return a.p_ == b.p_ || a.vec() == b.vec(); }

 private:
  static const std::vector<value_type>& empty_vec() {
    static const std::vector<value_type> none;
    return none;
  }
  std::shared_ptr<const std::vector<value_type>> p_;
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
