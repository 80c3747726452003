// src/core/regular_file.cpp — file kinds from stat(2), for refusing what is not a regular file.
#include "core/regular_file.h"

#include <sys/stat.h>

namespace lav {

std::optional<std::string> non_regular_kind(mode_t mode) {
    if (S_ISREG(mode)) return std::nullopt;
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::optional<std::string> non_regular_kind(const std::string& path) {
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) return std::nullopt;
    return non_regular_kind(status.st_mode);
}

}  // namespace lav
