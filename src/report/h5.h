// src/report/h5.h — RAII wrappers over the HDF5 C API for reports; not a general HDF5 binding.
//
// One throwing function per C call: every failure becomes a ReportError naming the file and the
// object path, with the innermost message of HDF5's error stack (whose automatic printing is
// switched off). A file opened for reading maps its failures to exit code 2 (the file is at
// fault); a file being written maps them to exit code 3 (the environment is).
//
//   h5::File file = h5::File::create("run.h5.tmp");
//   h5::Group cases = file.create_group("cases", h5::Order::kCreation);
//   h5::write_attribute(file, "case_count", int32_t{3});
//   h5::write_table(cases, "metrics", {{"tensor", std::vector<std::string>{"o"}},
//                                      {"rel_rmse", std::vector<double>{6.1e-3}}});
//   file.close();
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace lav::report::h5 {

/// Owns one HDF5 identifier and releases it with the H5*close function it came from.
class Handle {
  public:
    using CloseFn = herr_t (*)(hid_t);

    Handle() = default;
    Handle(hid_t id, CloseFn close) : id_(id), close_(close) {}
    Handle(Handle&& other) noexcept;
    Handle& operator=(Handle&& other) noexcept;
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle();

    hid_t get() const { return id_; }
    /// Releases the identifier now; false when HDF5 reports a failure.
    bool release();

  private:
    hid_t id_ = H5I_INVALID_HID;
    CloseFn close_ = nullptr;
};

/// An open file, group or dataset: its handle, the file it lives in and its path there.
class Object {
  public:
    hid_t id() const { return handle_.get(); }
    const std::string& path() const { return path_; }
    /// The path of a child called `name`.
    std::string child_path(const std::string& name) const;
    /// After a failed HDF5 call: throws ReportError "<file>: error: cannot <action> <object>:
    /// <innermost message of HDF5's error stack>".
    [[noreturn]] void fail(const std::string& action, const std::string& object) const;
    /// For contents lav does not expect: throws ReportError "<file>: error: <path> <what>".
    [[noreturn]] void invalid(const std::string& what) const;

  protected:
    Object(Handle handle, std::string file_name, std::string path, ExitCode exit_code);
    /// An object of the same file as `parent`.
    Object(Handle handle, const Object& parent, std::string path);
    Handle& handle() { return handle_; }

  private:
    Handle handle_;
    std::string file_name_;
    std::string path_;
    ExitCode exit_code_;
};

class Dataset : public Object {
  public:
    Dataset(Handle handle, const Object& parent, std::string path)
        : Object(std::move(handle), parent, std::move(path)) {}
    /// Number of rows of a 1-D dataset; throws if the dataset is not 1-D.
    size_t rows() const;
    /// The size of each dimension.
    std::vector<int64_t> dims() const;
};

/// How a group orders its links when listed.
enum class Order { kName, kCreation };

class Group : public Object {
  public:
    Group(Handle handle, const Object& parent, std::string path)
        : Object(std::move(handle), parent, std::move(path)) {}

    Group create_group(const std::string& name, Order order = Order::kName) const;
    Group open_group(const std::string& name) const;
    Dataset open_dataset(const std::string& name) const;
    /// Names of the links in this group, in creation order if the group tracks it.
    std::vector<std::string> link_names() const;

  protected:
    Group(Handle handle, std::string file_name, ExitCode exit_code)
        : Object(std::move(handle), std::move(file_name), "/", exit_code) {}
};

class File : public Group {
  public:
    /// Creates (truncates) `path` for writing, without HDF5's lock on it, so that readers may
    /// open the file while it is open here; failures map to exit code 3.
    static File create(const std::string& path);
    /// Opens `path` read-only; failures map to exit code 2.
    static File open_read_only(const std::string& path);
    /// Closes the file, so that everything written is on disk; throws on failure.
    void close();
    /// Writes everything written so far to the file, which then reads as it stands.
    void flush() const;

  private:
    File(Handle handle, std::string file_name, ExitCode exit_code)
        : Group(std::move(handle), std::move(file_name), exit_code) {}
};

/// Calls `write` with a temporary name of this process's own beside `path`, then renames it over
/// `path` in one step, so that readers see the old file or the new one. Failures (and the
/// temporary file) are cleaned up and thrown as ReportError with exit code 3, naming `what`
/// ("report"); a `path` that is not a regular file is refused first (check_output_path).
void write_file_atomically(const std::string& path, const std::string& what,
                           const std::function<void(const std::string&)>& write);

/// True when `path` is an HDF5 file (H5Fis_hdf5); false for any other file or none.
bool is_hdf5(const std::string& path);

bool has_attribute(const Object& object, const std::string& name);
/// Scalar attributes; an attribute of the same name is replaced. Strings are vlen UTF-8.
void write_attribute(const Object& object, const std::string& name, const std::string& value);
void write_attribute(const Object& object, const std::string& name, int32_t value);
void write_attribute(const Object& object, const std::string& name, int64_t value);
void write_attribute(const Object& object, const std::string& name, uint64_t value);
void write_attribute(const Object& object, const std::string& name, double value);
/// Reads a scalar attribute, converting between numeric types as HDF5 does. Defined for
/// std::string (vlen or fixed-length), int64_t, uint64_t and double.
template <typename T>
T read_attribute(const Object& object, const std::string& name);

/// A 1-D float64 dataset.
Dataset write_doubles(const Group& parent, const std::string& name,
                      const std::vector<double>& values);
std::vector<double> read_doubles(const Dataset& dataset);

/// An n-D float dataset of size `dims` from row-major `values`: IEEE f32 when `single` (exact
/// for values that are fp32, fp16 or bf16 numbers), else f64.
Dataset write_array(const Group& parent, const std::string& name, const std::vector<int64_t>& dims,
                    const std::vector<double>& values, bool single);
/// The values of an n-D float dataset, row-major, as doubles (see Dataset::dims()).
std::vector<double> read_array(const Dataset& dataset);

/// The values of one column of a compound table.
using ColumnValues =
    std::variant<std::vector<std::string>, std::vector<double>, std::vector<int64_t>,
                 std::vector<uint8_t>, std::vector<uint64_t>>;

/// One column: its member name in the compound type, and its values (one per row).
struct Column {
    std::string name;
    ColumnValues values;
};

/// A table held column by column; every column has the same number of rows.
using Table = std::vector<Column>;

/// Writes `table` as a 1-D compound dataset with one member per column: strings as vlen UTF-8,
/// doubles as IEEE f64, int64, uint8 and uint64 little-endian. An empty table gives an empty
/// dataset.
Dataset write_table(const Group& parent, const std::string& name, const Table& table);

/// An empty table with the columns of `like` (their values are ignored) that append_rows
/// extends: chunked by `chunk_rows`, with no limit on its rows.
Dataset create_growing_table(const Group& parent, const std::string& name, const Table& like,
                             size_t chunk_rows);
/// Appends `rows` (the columns of create_growing_table's `like`, in order) at the table's end.
void append_rows(const Dataset& dataset, const Table& rows);

/// Reads the columns that `like` names, typed as the (empty) vectors there say. Members the file
/// has beyond those are ignored; a missing member or a member of another kind is an error.
Table read_table(const Group& parent, const std::string& name, const Table& like);

/// Whether table `name` under `parent` has a column called `column`; throws if it is no table.
bool has_column(const Group& parent, const std::string& name, const std::string& column);

/// The values of column `name` of `table`; throws InternalError when it has none of type T.
/// (`name` is a view: a std::string made from a literal would be a temporary, and a reference
/// bound to the result would look dangling to gcc 13.)
template <typename T>
const std::vector<T>& column(const Table& table, std::string_view name) {
    for (const auto& c : table)
        if (c.name == name && std::holds_alternative<std::vector<T>>(c.values))
            return std::get<std::vector<T>>(c.values);
    LAV_ASSERT(false, "table has no column '", name, "' of the requested type");
    static const std::vector<T> kNone;
    return kNone;
}

}  // namespace lav::report::h5
