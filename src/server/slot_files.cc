#include "server/slot_files.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cstdint>

#include "base/utf8.h"

namespace mnemo::server {
namespace {

// Characters a file name may not hold because they hide or reorder what a reader sees (Unicode
// Standard Annex #9 for the bidirectional controls; U+2028 / U+2029 break lines in logs).
bool is_deceptive(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0xFEFF || cp == 0x061C || cp == 0x200E ||
         cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

Status validate_slot_filename(std::string_view name) {
  if (name.empty()) return Status::invalid_argument("the file name is empty");
  if (name.size() > kMaxSlotFileName) {
    return Status::invalid_argument(
        fmt::format("the file name is {} bytes long; at most {}", name.size(), kMaxSlotFileName));
  }
  for (size_t i = 0; i < name.size();) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      return Status::invalid_argument(
          fmt::format("the file name has a control character (0x{:02x}) at byte {}", c, i));
    }
    if (c == '/' || c == '\\') {
      return Status::invalid_argument(
          fmt::format("the file name has a path separator at byte {}", i));
    }
    uint32_t cp = 0;
    size_t next = i;
    if (!utf8::decode_strict(name, &next, &cp)) {
      return Status::invalid_argument(
          fmt::format("the file name is not valid UTF-8 at byte {}", i));
    }
    if (is_deceptive(cp)) {
      return Status::invalid_argument(fmt::format(
          "the file name has U+{:04X} (a control, bidirectional or separator character) at byte {}",
          cp, i));
    }
    i = next;
  }
  if (name.find("..") != std::string_view::npos) {
    return Status::invalid_argument("the file name contains '..'");
  }
  if (name.front() == '.' || name.front() == ' ') {
    return Status::invalid_argument("the file name starts with a dot or a space");
  }
  if (name.back() == '.' || name.back() == ' ') {
    return Status::invalid_argument("the file name ends with a dot or a space");
  }
  return Status();
}

Result<std::string> slot_file_path(const std::string& dir, std::string_view name) {
  MNEMO_RETURN_IF_ERROR(validate_slot_filename(name));
  std::string path = dir;
  if (path.empty() || path.back() != '/') path += '/';
  path.append(name);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::invalid_argument("'" + std::string(name) + "' exists and is not a regular file");
  }
  return path;
}

}  // namespace mnemo::server
