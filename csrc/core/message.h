// Error-message builder without iostreams.
//
// std::ostringstream crashed when thrown through on the CUDA build of MLX (libmlx.so
// there carries its own copies of some libstdc++ stream symbols); messages are built
// with std::string and std::to_string instead.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

namespace lattice {

class Message {
 public:
  Message& operator<<(const std::string& s) {
    s_ += s;
    return *this;
  }
  Message& operator<<(const char* s) {
    s_ += s;
    return *this;
  }
  Message& operator<<(char c) {
    s_ += c;
    return *this;
  }
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, char>, int> = 0>
  Message& operator<<(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      std::string t = std::to_string(v);
      // trim trailing zeros of std::to_string's fixed notation
      if (t.find('.') != std::string::npos) {
        while (!t.empty() && t.back() == '0') t.pop_back();
        if (!t.empty() && t.back() == '.') t.pop_back();
      }
      s_ += t;
    } else {
      s_ += std::to_string(v);
    }
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

}  // namespace lattice
