// src/core/regular_file.h — what a path is when it is not a regular file: lav reads only regular
// files, since a FIFO would block the read forever and a device such as /dev/zero never ends.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace lav {

/// nullopt for a regular file's st_mode; else what the file is, for messages: "a FIFO",
/// "a character device", "a block device", "a socket", "a directory".
std::optional<std::string> non_regular_kind(mode_t mode);

/// non_regular_kind of what `path` names (links followed), without opening it; nullopt also
/// when `path` does not exist (its reader then says so).
std::optional<std::string> non_regular_kind(const std::string& path);

}  // namespace lav
