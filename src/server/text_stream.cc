#include "server/text_stream.h"

#include <algorithm>

#include "base/utf8.h"

namespace mnemo::server {

void TextStream::reset(std::vector<std::string> stop) {
  stop_.clear();
  max_stop_ = 0;
  for (auto& s : stop) {
    if (s.empty()) continue;
    max_stop_ = std::max(max_stop_, s.size());
    stop_.push_back(std::move(s));
  }
  text_.clear();
  sent_ = 0;
  stop_word_.clear();
}

size_t TextStream::incomplete_utf8_tail(std::string_view s) { return utf8::incomplete_tail(s); }

std::string TextStream::append(std::string_view piece) {
  if (stopped()) return {};
  text_.append(piece);
  // A stop string can only start in the unsent part or overlap it by less than its length.
  if (!stop_.empty()) {
    const size_t from = sent_ >= max_stop_ ? sent_ - max_stop_ + 1 : 0;
    size_t best = std::string::npos;
    const std::string* word = nullptr;
    for (const std::string& s : stop_) {
      const size_t at = text_.find(s, from);
      if (at != std::string::npos && at < best) {
        best = at;
        word = &s;
      }
    }
    if (word != nullptr) {
      stop_word_ = *word;
      // Text already sent cannot be taken back; a match reaching into it ends the text there.
      const size_t cut = std::max(best, sent_);
      text_.resize(cut);
      std::string out = text_.substr(sent_);
      sent_ = text_.size();
      return out;
    }
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    const size_t max_k = std::min(s.size() - 1, text_.size() - sent_);
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(text_).substr(text_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  size_t end = text_.size() - hold;
  end -= incomplete_utf8_tail(std::string_view(text_).substr(sent_, end - sent_));
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string TextStream::flush() {
  if (stopped()) return {};
  std::string out = text_.substr(sent_);
  sent_ = text_.size();
  return out;
}

}  // namespace mnemo::server
