// Slot file names for POST /slots/{id}?action=save|restore: what a client may name a file, and
// where it lands. Files only ever live directly inside --slot-save-path.
#pragma once

#include <string>
#include <string_view>

#include "mnemo/status.h"

namespace mnemo::server {

/// Longest accepted file name, in bytes: the usual file-system limit (NAME_MAX, 255) less the
/// suffix of the temporary file a save writes first (".tmp." and a process id of up to 10
/// digits, src/memory/state_io.cc), so that a name that passes can always be written.
inline constexpr size_t kMaxSlotFileName = 255 - 15;

/// Accepts a bare file name; InvalidArgument naming the rule for one that is empty, longer than
/// kMaxSlotFileName bytes, contains a path separator ('/' or '\\'), contains "..", starts with
/// '.' or ' ', ends with '.' or ' ', is not valid UTF-8, or contains a character that hides or
/// reorders what a reader sees: a control character (U+0000-U+001F, U+007F-U+009F), a byte-order
/// mark or zero-width no-break space (U+FEFF), a bidirectional control (U+061C, U+200E, U+200F,
/// U+202A-U+202E, U+2066-U+2069) or a line / paragraph separator (U+2028, U+2029). A name that
/// passes cannot leave the directory it is joined to.
Status validate_slot_filename(std::string_view name);

/// dir + "/" + name for a name that passes validate_slot_filename (same errors otherwise). When
/// the file exists it must be a regular file, not a symbolic link (InvalidArgument), so a link
/// planted in the directory cannot redirect a save or restore elsewhere.
Result<std::string> slot_file_path(const std::string& dir, std::string_view name);

}  // namespace mnemo::server
