// TextStream: turns the pieces of generated tokens into text that is safe to send now.
//
// Two things are held back until more text decides them:
//   - an incomplete UTF-8 character at the end (a token's piece may end mid-character);
//   - a suffix that is a prefix of some stop string (it may become a stop match).
// When a stop string appears, the text before its first occurrence is released and the rest is
// dropped; the stream then reports the match. Pure and single-threaded (the loop owns one per
// slot); unit-tested in server_test.cc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mnemo::server {

class TextStream {
 public:
  /// Starts a new completion with these stop strings (empty strings are ignored).
  void reset(std::vector<std::string> stop);

  /// Appends a token's piece; returns the text that can be sent now (may be empty). After a
  /// stop match (stopped() true) further pieces are ignored.
  std::string append(std::string_view piece);
  /// The end of the completion: everything still held back (an incomplete UTF-8 tail
  /// included), or "" after a stop match.
  std::string flush();

  bool stopped() const { return !stop_word_.empty(); }
  /// The stop string that matched ("" when none).
  const std::string& stop_word() const { return stop_word_; }
  /// All text released so far plus what is held back (stop match removed).
  const std::string& text() const { return text_; }

  /// Bytes at the end of `s` that begin a UTF-8 character not yet complete (0..3).
  static size_t incomplete_utf8_tail(std::string_view s);

 private:
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;  // longest stop string, bytes
  std::string text_;     // the completion's text so far
  size_t sent_ = 0;      // bytes of text_ released
  std::string stop_word_;
};

}  // namespace mnemo::server
