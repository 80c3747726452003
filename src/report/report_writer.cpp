// src/report/report_writer.cpp — ReportWriter: two files take turns being the report, so that a
// case is appended to each once, in place, and the report is still replaced in one step.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <utility>

#include "report/layout.h"
#include "report/output.h"

namespace lav::report {
namespace {

constexpr const char* kNote = "\nnote: reports go to a folder lav can create and write, with room";

/// An exclusive flock on a file while it is appended to, unless a reader has the file open:
/// HDF5 (h5py's too) holds a shared flock on a file it reads.
class Unread {
  public:
    explicit Unread(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
        if (fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) != 0) release();
    }
    ~Unread() { release(); }
    Unread(const Unread&) = delete;
    Unread& operator=(const Unread&) = delete;
    bool held() const { return fd_ >= 0; }
    void release() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

  private:
    int fd_;
};

}  // namespace

/// One of the two files: open for writing throughout, named by a temporary name of its own.
struct ReportWriter::Copy {
    TemporaryFile name;
    h5::File file;
    layout::Tables tables;
    size_t written = 0;  ///< the cases it holds

    Copy(std::string path, const Report& report)
        : name(std::move(path)),
          file(h5::File::create(name.path())),
          tables(layout::create_tables(file)) {
        layout::write_run(file, report);
    }
};

ReportWriter::ReportWriter(std::string path, RunInfo run)
    : path_(std::move(path)), sharing_(std::make_unique<layout::Sharing>()) {
    report_.run = std::move(run);
    publish(false);
}

ReportWriter::ReportWriter(std::string path, Report resumed)
    : path_(std::move(path)),
      report_(std::move(resumed)),
      sharing_(std::make_unique<layout::Sharing>()) {
    report_.complete = false;
    publish(false);
}

ReportWriter::~ReportWriter() = default;

void ReportWriter::add(CaseRecord record) {
    report_.cases.push_back(std::move(record));
    const std::chrono::duration<double> since = std::chrono::steady_clock::now() - published_;
    if (since.count() >= interval_) publish(false);
}

void ReportWriter::finish() {
    report_.complete = true;
    publish(true);
    copies_ = {};
}

void ReportWriter::publish(bool last) {
    const auto start = std::chrono::steady_clock::now();
    publish_now(last);
    published_ = std::chrono::steady_clock::now();
    seconds_writing_ += std::chrono::duration<double>(published_ - start).count();
}

void ReportWriter::publish_now(bool last) {
    check_output_path(path_);
    std::unique_ptr<Copy>& slot = copies_[lagging_];
    try {
        const std::filesystem::path folder = std::filesystem::path(path_).parent_path();
        if (!folder.empty()) std::filesystem::create_directories(folder);
        // a reader that opened this copy while it was in place would see it change: it keeps
        // that file, and a new copy is written from the start; the lock keeps a reader that
        // comes late off it until it is complete
        Unread unread(slot ? slot->name.path() : std::string());
        if (slot && !unread.held()) slot.reset();
        if (!slot) slot = std::make_unique<Copy>(temporary_name(path_, "tmp"), report_);
        Copy& copy = *slot;
        const size_t count = report_.cases.size();
        sharing_->extend(report_.cases);
        layout::append_cases(copy.tables, report_.cases, *sharing_, copy.written, count);
        copy.written = count;
        h5::write_attribute(copy.file, "case_count", static_cast<int32_t>(count));
        h5::write_attribute(copy.file, "complete", int32_t{report_.complete ? 1 : 0});
        copy.file.flush();
        unread.release();
        // one step from the previous report to this one, whenever the process dies
        std::filesystem::rename(copy.name.path(), path_);
        // a second name, to catch this copy up again once the other has taken its place; a file
        // system without hard links gets a new copy written from the start each time instead
        if (last || ::link(path_.c_str(), copy.name.path().c_str()) != 0) {
            copy.name.release();
            if (!last) slot.reset();
        }
        lagging_ ^= 1;
    } catch (const std::filesystem::filesystem_error& e) {
        slot.reset();
        throw ReportError(path_ + ": error: cannot write the report: " + e.code().message() + " (" +
                              e.path1().string() + ")" + kNote,
                          ExitCode::kEnvironment);
    } catch (const ReportError& e) {
        // half written: the next publish starts this copy afresh
        slot.reset();
        throw ReportError(e.what() + std::string(kNote), ExitCode::kEnvironment);
    }
}

}  // namespace lav::report
