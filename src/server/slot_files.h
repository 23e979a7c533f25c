// Slot file names for POST /slots/{id}?action=save|restore: what a client may name a file, and
// where it lands. Files only ever live directly inside --slot-save-path.
#pragma once

#include <string>
#include <string_view>

#include "mnemo/status.h"

namespace mnemo::server {

/// Longest accepted file name, in bytes (the usual file-system limit).
inline constexpr size_t kMaxSlotFileName = 255;

/// Accepts a bare file name; InvalidArgument naming the rule for one that is empty, longer than
/// 255 bytes, contains a path separator ('/' or '\\'), contains "..", starts with '.' or ' ',
/// ends with '.' or ' ', contains a control character (bytes 0x00-0x1F and 0x7F), or is not
/// valid UTF-8. A name that passes cannot leave the directory it is joined to.
Status validate_slot_filename(std::string_view name);

/// dir + "/" + name for a name that passes validate_slot_filename (same errors otherwise). When
/// the file exists it must be a regular file, not a symbolic link (InvalidArgument), so a link
/// planted in the directory cannot redirect a save or restore elsewhere.
Result<std::string> slot_file_path(const std::string& dir, std::string_view name);

}  // namespace mnemo::server
