// Names, locks, reads and syncs of a namespace's files (disk_files.h).
#include "prompt_cache/disk_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "prompt_cache/block_hash.h"

namespace mnemo::prompt_cache {

std::string entry_file_name(uint64_t key) { return hex16(key) + kEntrySuffix; }

std::optional<uint64_t> key_of_file_name(const std::string& name) {
  const std::string suffix = kEntrySuffix;
  if (name.size() != 16 + suffix.size() || name.compare(16, suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    int d = 0;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | uint64_t(d);
  }
  return v;
}

bool is_temp_file_name(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

FileLock::FileLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

namespace {

int flock_retrying(int fd, int op) {
  int rc = 0;
  do {
    rc = ::flock(fd, op);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Result<DirLock> DirLock::shared(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::not_found("no such directory");
    return Status::io_error(std::string("cannot open the directory: ") + std::strerror(e));
  }
  DirLock lock(fd);
  if (flock_retrying(fd, LOCK_SH) != 0) {
    return Status::io_error(std::string("cannot lock the directory: ") + std::strerror(errno));
  }
  // A clear may have removed the directory while this waited: the lock is then on a directory
  // no longer there (or no longer at that name).
  struct stat held, now;
  if (::fstat(fd, &held) != 0 || ::stat(dir.c_str(), &now) != 0 || held.st_dev != now.st_dev ||
      held.st_ino != now.st_ino || held.st_nlink == 0) {
    return Status::not_found("the directory was removed");
  }
  return lock;
}

Result<DirLock> DirLock::try_exclusive(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Status::io_error(std::string("cannot open the directory: ") + std::strerror(errno));
  }
  if (flock_retrying(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK) return DirLock();
    return Status::io_error(std::string("cannot lock the directory: ") + std::strerror(e));
  }
  return DirLock(fd);
}

Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::io_error(std::string("cannot open: ") + std::strerror(errno));
  int rc = 0;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::io_error(std::string("fsync: ") + std::strerror(err));
  return Status();
}

Result<std::shared_ptr<std::vector<uint8_t>>> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return e == ENOENT
               ? Status::not_found("no such entry file")
               : Status::io_error(std::string("cannot open an entry file: ") + std::strerror(e));
  }
  struct stat st;
  auto out = std::make_shared<std::vector<uint8_t>>();
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::io_error(std::string("cannot stat an entry file: ") + std::strerror(errno));
  } else {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      const ssize_t n = ::read(fd, out->data() + got, out->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = Status::io_error("short read of an entry file");
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

}  // namespace mnemo::prompt_cache
