// src/report/h5.cpp — the HDF5 C calls behind h5.h, each checked and turned into ReportError.
#include "report/h5.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <type_traits>

#include "report/output.h"

namespace lav::report::h5 {
namespace {

void silence_error_printing() {
    // lav reports HDF5 failures itself; HDF5's default handler would print its stack to stderr
    static const bool kSilenced = [] {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)kSilenced;
}

herr_t keep_innermost(unsigned n, const H5E_error2_t* error, void* out) {
    // the upward walk starts at the function that detected the error, the most specific one
    if (n == 0 && error->desc != nullptr) *static_cast<std::string*>(out) = error->desc;
    return 0;
}

std::string hdf5_message() {
    std::string message;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &message);
    return message.empty() ? "HDF5 gave no reason" : message;
}

/// Returns `result` unless it is negative, HDF5's sign of failure; then throws via `where`.
template <typename R>
R check(R result, const Object& where, const char* action, const std::string& object) {
    if (result < 0) where.fail(action, object);
    return result;
}

std::string attribute_desc(const Object& object, const std::string& name) {
    return "attribute '" + name + "' of " + object.path();
}

Handle utf8_string_type(const Object& where, const std::string& object) {
    Handle type(check(H5Tcopy(H5T_C_S1), where, "make a string type for", object), H5Tclose);
    check(H5Tset_size(type.get(), H5T_VARIABLE), where, "make a string type for", object);
    check(H5Tset_cset(type.get(), H5T_CSET_UTF8), where, "make a string type for", object);
    return type;
}

void require_single_value(const Object& object, hid_t attribute, const std::string& desc) {
    Handle space(check(H5Aget_space(attribute), object, "read", desc), H5Sclose);
    if (check(H5Sget_simple_extent_npoints(space.get()), object, "read", desc) != 1)
        object.invalid("has " + desc + " with more than one value");
}

void write_scalar(const Object& object, const std::string& name, hid_t file_type, hid_t memory_type,
                  const void* value) {
    const std::string desc = attribute_desc(object, name);
    if (check(H5Aexists(object.id(), name.c_str()), object, "look up", desc) > 0) {
        // written over in place: deleting and creating again would leave the old one's space
        // unused in the file each time a report updates its case count
        Handle attribute(
            check(H5Aopen(object.id(), name.c_str(), H5P_DEFAULT), object, "open", desc), H5Aclose);
        check(H5Awrite(attribute.get(), memory_type, value), object, "write", desc);
        return;
    }
    Handle space(check(H5Screate(H5S_SCALAR), object, "write", desc), H5Sclose);
    Handle attribute(check(H5Acreate2(object.id(), name.c_str(), file_type, space.get(),
                                      H5P_DEFAULT, H5P_DEFAULT),
                           object, "create", desc),
                     H5Aclose);
    check(H5Awrite(attribute.get(), memory_type, value), object, "write", desc);
}

void read_number(const Object& object, const std::string& name, hid_t memory_type, void* out) {
    const std::string desc = attribute_desc(object, name);
    Handle attribute(check(H5Aopen(object.id(), name.c_str(), H5P_DEFAULT), object, "open", desc),
                     H5Aclose);
    require_single_value(object, attribute.get(), desc);
    check(H5Aread(attribute.get(), memory_type, out), object, "read", desc);
}

// ---- compound tables ----

/// Index of each ColumnValues alternative: string, double, int64, uint8, uint64.
enum Kind : size_t { kString = 0, kFloat64 = 1, kInt64 = 2, kUInt8 = 3, kUInt64 = 4 };

const char* kind_name(size_t kind) {
    switch (kind) {
        case kString:
            return "a string";
        case kFloat64:
            return "a float";
        default:
            return "an integer";
    }
}

H5T_class_t kind_class(size_t kind) {
    switch (kind) {
        case kString:
            return H5T_STRING;
        case kFloat64:
            return H5T_FLOAT;
        default:
            return H5T_INTEGER;
    }
}

size_t memory_size(size_t kind) {
    switch (kind) {
        case kString:
            return sizeof(char*);
        case kFloat64:
            return sizeof(double);
        case kInt64:
            return sizeof(int64_t);
        case kUInt64:
            return sizeof(uint64_t);
        default:
            return sizeof(uint8_t);
    }
}

size_t row_count(const Table& table) {
    if (table.empty()) return 0;
    return std::visit([](const auto& v) { return v.size(); }, table.front().values);
}

/// A compound type in memory (naturally aligned members) and on disk (packed, little-endian
/// standard types), with the memory offset of each column.
struct Compound {
    Handle memory;
    Handle file;
    std::vector<size_t> offsets;
    size_t row_size = 0;
};

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

Compound make_compound(const Object& where, const std::string& object, const Table& table) {
    const char* action = "make the row type of";
    Compound out;
    // H5Tinsert copies member types, so one string type serves every string column
    Handle string_type = utf8_string_type(where, object);
    std::vector<hid_t> memory_members;
    std::vector<hid_t> file_members;
    size_t file_size = 0;
    for (const auto& c : table) {
        const size_t kind = c.values.index();
        memory_members.push_back(kind == kString    ? string_type.get()
                                 : kind == kFloat64 ? H5T_NATIVE_DOUBLE
                                 : kind == kInt64   ? H5T_NATIVE_INT64
                                 : kind == kUInt64  ? H5T_NATIVE_UINT64
                                                    : H5T_NATIVE_UINT8);
        file_members.push_back(kind == kString    ? string_type.get()
                               : kind == kFloat64 ? H5T_IEEE_F64LE
                               : kind == kInt64   ? H5T_STD_I64LE
                               : kind == kUInt64  ? H5T_STD_U64LE
                                                  : H5T_STD_U8LE);
        file_size += H5Tget_size(file_members.back());
        // member sizes are powers of two, so aligning each to its size is natural alignment
        const size_t size = memory_size(kind);
        out.row_size = round_up(out.row_size, size);
        out.offsets.push_back(out.row_size);
        out.row_size += size;
    }
    out.row_size = round_up(out.row_size, alignof(double));

    out.memory = Handle(
        check(H5Tcreate(H5T_COMPOUND, std::max<size_t>(out.row_size, 1)), where, action, object),
        H5Tclose);
    out.file = Handle(
        check(H5Tcreate(H5T_COMPOUND, std::max<size_t>(file_size, 1)), where, action, object),
        H5Tclose);
    size_t file_offset = 0;
    for (size_t i = 0; i < table.size(); ++i) {
        const char* name = table[i].name.c_str();
        check(H5Tinsert(out.memory.get(), name, out.offsets[i], memory_members[i]), where, action,
              object);
        check(H5Tinsert(out.file.get(), name, file_offset, file_members[i]), where, action, object);
        file_offset += H5Tget_size(file_members[i]);
    }
    return out;
}

/// Transfer properties for table reads and writes. HDF5 allocates and clears a type-conversion
/// buffer (1 MiB by default) on every compound read or write; report tables are a few KiB, and
/// with the default, writing a 1000-case report took 3.1 s instead of 0.3 s. HDF5 converts a
/// table larger than the buffer in strips.
Handle table_transfer(const Object& where, const std::string& object) {
    constexpr size_t kConversionBuffer = 64 * 1024;
    Handle transfer(check(H5Pcreate(H5P_DATASET_XFER), where, "transfer", object), H5Pclose);
    check(H5Pset_buffer(transfer.get(), kConversionBuffer, nullptr, nullptr), where, "transfer",
          object);
    return transfer;
}

}  // namespace

// ---- Handle ----

Handle::Handle(Handle&& other) noexcept : id_(other.id_), close_(other.close_) {
    other.id_ = H5I_INVALID_HID;
    other.close_ = nullptr;
}

Handle& Handle::operator=(Handle&& other) noexcept {
    if (this != &other) {
        release();
        id_ = other.id_;
        close_ = other.close_;
        other.id_ = H5I_INVALID_HID;
        other.close_ = nullptr;
    }
    return *this;
}

Handle::~Handle() { release(); }

bool Handle::release() {
    if (id_ < 0 || close_ == nullptr) return true;
    const herr_t result = close_(id_);
    id_ = H5I_INVALID_HID;
    return result >= 0;
}

// ---- Object, Dataset, Group, File ----

Object::Object(Handle handle, std::string file_name, std::string path, ExitCode exit_code)
    : handle_(std::move(handle)),
      file_name_(std::move(file_name)),
      path_(std::move(path)),
      exit_code_(exit_code) {}

Object::Object(Handle handle, const Object& parent, std::string path)
    : Object(std::move(handle), parent.file_name_, std::move(path), parent.exit_code_) {}

std::string Object::child_path(const std::string& name) const {
    return path_ == "/" ? "/" + name : path_ + "/" + name;
}

void Object::fail(const std::string& action, const std::string& object) const {
    const std::string reason = hdf5_message();
    throw ReportError(file_name_ + ": error: cannot " + action +
                          (object.empty() ? "" : " " + object) + ": " + reason,
                      exit_code_);
}

void Object::invalid(const std::string& what) const {
    throw ReportError(file_name_ + ": error: " + path_ + " " + what, exit_code_);
}

size_t Dataset::rows() const {
    Handle space(check(H5Dget_space(id()), *this, "read the shape of", path()), H5Sclose);
    if (check(H5Sget_simple_extent_ndims(space.get()), *this, "read the shape of", path()) != 1)
        invalid("is not a 1-D dataset");
    hsize_t rows = 0;
    check(H5Sget_simple_extent_dims(space.get(), &rows, nullptr), *this, "read the shape of",
          path());
    return static_cast<size_t>(rows);
}

Group Group::create_group(const std::string& name, Order order) const {
    const std::string path = child_path(name);
    Handle properties(check(H5Pcreate(H5P_GROUP_CREATE), *this, "create group", path), H5Pclose);
    if (order == Order::kCreation)
        check(H5Pset_link_creation_order(properties.get(),
                                         H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
              *this, "create group", path);
    const hid_t group = H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, properties.get(), H5P_DEFAULT);
    return Group(Handle(check(group, *this, "create group", path), H5Gclose), *this, path);
}

Group Group::open_group(const std::string& name) const {
    const std::string path = child_path(name);
    const hid_t group = H5Gopen2(id(), name.c_str(), H5P_DEFAULT);
    return Group(Handle(check(group, *this, "open group", path), H5Gclose), *this, path);
}

Dataset Group::open_dataset(const std::string& name) const {
    const std::string path = child_path(name);
    const hid_t dataset = H5Dopen2(id(), name.c_str(), H5P_DEFAULT);
    return Dataset(Handle(check(dataset, *this, "open dataset", path), H5Dclose), *this, path);
}

std::vector<std::string> Group::link_names() const {
    H5G_info_t info;
    check(H5Gget_info(id(), &info), *this, "list group", path());
    Handle properties(check(H5Gget_create_plist(id()), *this, "list group", path()), H5Pclose);
    unsigned flags = 0;
    check(H5Pget_link_creation_order(properties.get(), &flags), *this, "list group", path());
    const H5_index_t index =
        (flags & H5P_CRT_ORDER_INDEXED) != 0 ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t length =
            check(H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
                  *this, "list group", path());
        std::vector<char> name(static_cast<size_t>(length) + 1, '\0');
        check(H5Lget_name_by_idx(id(), ".", index, H5_ITER_INC, i, name.data(), name.size(),
                                 H5P_DEFAULT),
              *this, "list group", path());
        names.emplace_back(name.data(), static_cast<size_t>(length));
    }
    return names;
}

File File::create(const std::string& path) {
    silence_error_printing();
    // HDF5 would hold an exclusive flock on the file while it is open here, and a reader of a
    // report a running lav has put in place (still open to catch up later) would be refused;
    // one writer per report is OutputLock's job
    Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    if (access.get() >= 0) H5Pset_file_locking(access.get(), false, true);
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
    File out(Handle(file, H5Fclose), path, ExitCode::kEnvironment);
    if (file < 0) out.fail("create the file", "");
    return out;
}

void File::flush() const {
    if (H5Fflush(id(), H5F_SCOPE_LOCAL) < 0) fail("write the file", "");
}

File File::open_read_only(const std::string& path) {
    silence_error_printing();
    // HDF5's shared lock tells a running ReportWriter that this file is being read; HDF5
    // refuses it for a file this process writes (File::create opens without locks), which
    // is then read without one
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        if (access.get() >= 0) H5Pset_file_locking(access.get(), false, true);
        file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get());
    }
    File out(Handle(file, H5Fclose), path, ExitCode::kUsage);
    if (file < 0) out.fail("open the file", "");
    return out;
}

void File::close() {
    if (!handle().release()) fail("close the file", "");
}

void write_file_atomically(const std::string& path, const std::string& what,
                           const std::function<void(const std::string&)>& write) {
    check_output_path(path);
    const std::string note =
        "\nnote: " + what + "s go to a folder lav can create and write, with room";
    try {
        const std::filesystem::path folder = std::filesystem::path(path).parent_path();
        if (!folder.empty()) std::filesystem::create_directories(folder);
        TemporaryFile temporary(temporary_name(path, "tmp"));
        write(temporary.path());
        // rename replaces the target in one step: readers see the old file or the new one
        std::filesystem::rename(temporary.path(), path);
        temporary.release();
    } catch (const std::filesystem::filesystem_error& e) {
        throw ReportError(path + ": error: cannot write the " + what + ": " + e.code().message() +
                              " (" + e.path1().string() + ")" + note,
                          ExitCode::kEnvironment);
    } catch (const ReportError& e) {
        throw ReportError(e.what() + note, ExitCode::kEnvironment);
    }
}

bool is_hdf5(const std::string& path) {
    silence_error_printing();
    return H5Fis_hdf5(path.c_str()) > 0;
}

// ---- attributes ----

bool has_attribute(const Object& object, const std::string& name) {
    return check(H5Aexists(object.id(), name.c_str()), object, "look up",
                 attribute_desc(object, name)) > 0;
}

void write_attribute(const Object& object, const std::string& name, const std::string& value) {
    Handle type = utf8_string_type(object, attribute_desc(object, name));
    const char* chars = value.c_str();
    write_scalar(object, name, type.get(), type.get(), &chars);
}

void write_attribute(const Object& object, const std::string& name, int32_t value) {
    write_scalar(object, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

void write_attribute(const Object& object, const std::string& name, int64_t value) {
    write_scalar(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attribute(const Object& object, const std::string& name, uint64_t value) {
    write_scalar(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void write_attribute(const Object& object, const std::string& name, double value) {
    write_scalar(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

template <>
std::string read_attribute<std::string>(const Object& object, const std::string& name) {
    const std::string desc = attribute_desc(object, name);
    Handle attribute(check(H5Aopen(object.id(), name.c_str(), H5P_DEFAULT), object, "open", desc),
                     H5Aclose);
    require_single_value(object, attribute.get(), desc);
    Handle type(check(H5Aget_type(attribute.get()), object, "read", desc), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) object.invalid("has " + desc + " not a string");
    // the file's own string type serves as the memory type: char* for vlen, char[n] for fixed
    if (check(H5Tis_variable_str(type.get()), object, "read", desc) > 0) {
        char* chars = nullptr;
        check(H5Aread(attribute.get(), type.get(), &chars), object, "read", desc);
        std::string value = chars != nullptr ? chars : "";
        H5free_memory(chars);
        return value;
    }
    const size_t size = H5Tget_size(type.get());
    std::vector<char> chars(size + 1, '\0');
    check(H5Aread(attribute.get(), type.get(), chars.data()), object, "read", desc);
    return std::string(chars.data(), strnlen(chars.data(), size));
}

template <>
int64_t read_attribute<int64_t>(const Object& object, const std::string& name) {
    int64_t value = 0;
    read_number(object, name, H5T_NATIVE_INT64, &value);
    return value;
}

template <>
uint64_t read_attribute<uint64_t>(const Object& object, const std::string& name) {
    uint64_t value = 0;
    read_number(object, name, H5T_NATIVE_UINT64, &value);
    return value;
}

template <>
double read_attribute<double>(const Object& object, const std::string& name) {
    double value = 0;
    read_number(object, name, H5T_NATIVE_DOUBLE, &value);
    return value;
}

// ---- datasets ----

Dataset write_array(const Group& parent, const std::string& name, const std::vector<int64_t>& dims,
                    const std::vector<double>& values, bool single) {
    const std::string path = parent.child_path(name);
    const std::vector<hsize_t> extent(dims.begin(), dims.end());
    size_t count = 1;
    for (const hsize_t n : extent) count *= n;
    LAV_ASSERT(!extent.empty() && count == values.size(), "array ", path, " has ", values.size(),
               " values for ", count, " elements");
    Handle space(check(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr),
                       parent, "create dataset", path),
                 H5Sclose);
    const hid_t dataset =
        H5Dcreate2(parent.id(), name.c_str(), single ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, space.get(),
                   H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    Dataset out(Handle(check(dataset, parent, "create dataset", path), H5Dclose), parent, path);
    if (count > 0)
        check(H5Dwrite(out.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
              out, "write dataset", path);
    return out;
}

Dataset write_doubles(const Group& parent, const std::string& name,
                      const std::vector<double>& values) {
    return write_array(parent, name, {static_cast<int64_t>(values.size())}, values, false);
}

std::vector<int64_t> Dataset::dims() const {
    Handle space(check(H5Dget_space(id()), *this, "read the shape of", path()), H5Sclose);
    const int rank =
        check(H5Sget_simple_extent_ndims(space.get()), *this, "read the shape of", path());
    std::vector<hsize_t> extent(static_cast<size_t>(rank));
    check(H5Sget_simple_extent_dims(space.get(), extent.data(), nullptr), *this,
          "read the shape of", path());
    return {extent.begin(), extent.end()};
}

std::vector<double> read_doubles(const Dataset& dataset) {
    dataset.rows();  // refuses anything but 1-D
    return read_array(dataset);
}

std::vector<double> read_array(const Dataset& dataset) {
    size_t count = 1;
    for (const int64_t n : dataset.dims()) count *= static_cast<size_t>(n);
    std::vector<double> values(count);
    Handle type(check(H5Dget_type(dataset.id()), dataset, "read dataset", dataset.path()),
                H5Tclose);
    if (H5Tget_class(type.get()) != H5T_FLOAT) dataset.invalid("is not a float dataset");
    if (!values.empty())
        check(
            H5Dread(dataset.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
            dataset, "read dataset", dataset.path());
    return values;
}

namespace {

/// The rows of `table` laid out as `row_type` says, for H5Dwrite; strings are pointers into the
/// table, which must outlive the buffer.
std::vector<unsigned char> pack_rows(const Table& table, const Compound& row_type,
                                     const std::string& path) {
    const size_t rows = row_count(table);
    for (const auto& c : table)
        LAV_ASSERT(std::visit([](const auto& v) { return v.size(); }, c.values) == rows, "column ",
                   c.name, " of ", path, " has a different number of rows");
    std::vector<unsigned char> buffer(rows * row_type.row_size);
    for (size_t i = 0; i < table.size(); ++i) {
        unsigned char* at = buffer.data() + row_type.offsets[i];
        std::visit(
            [&](const auto& values) {
                using T = typename std::decay_t<decltype(values)>::value_type;
                for (size_t r = 0; r < rows; ++r, at += row_type.row_size) {
                    if constexpr (std::is_same_v<T, std::string>) {
                        // HDF5 reads vlen strings through char* and copies them while writing
                        const char* chars = values[r].c_str();
                        std::memcpy(at, &chars, sizeof chars);
                    } else {
                        std::memcpy(at, &values[r], sizeof(T));
                    }
                }
            },
            table[i].values);
    }
    return buffer;
}

}  // namespace

Dataset write_table(const Group& parent, const std::string& name, const Table& table) {
    const std::string path = parent.child_path(name);
    const Compound row_type = make_compound(parent, path, table);
    const std::vector<unsigned char> buffer = pack_rows(table, row_type, path);
    const hsize_t dims = row_count(table);
    Handle space(check(H5Screate_simple(1, &dims, nullptr), parent, "create dataset", path),
                 H5Sclose);
    const hid_t dataset = H5Dcreate2(parent.id(), name.c_str(), row_type.file.get(), space.get(),
                                     H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    Dataset out(Handle(check(dataset, parent, "create dataset", path), H5Dclose), parent, path);
    if (dims > 0)
        check(H5Dwrite(out.id(), row_type.memory.get(), H5S_ALL, H5S_ALL,
                       table_transfer(out, path).get(), buffer.data()),
              out, "write dataset", path);
    return out;
}

Dataset create_growing_table(const Group& parent, const std::string& name, const Table& like,
                             size_t chunk_rows) {
    const std::string path = parent.child_path(name);
    const Compound row_type = make_compound(parent, path, like);
    const hsize_t dims = 0;
    const hsize_t max_dims = H5S_UNLIMITED;
    const hsize_t chunk = chunk_rows;
    Handle space(check(H5Screate_simple(1, &dims, &max_dims), parent, "create dataset", path),
                 H5Sclose);
    Handle properties(check(H5Pcreate(H5P_DATASET_CREATE), parent, "create dataset", path),
                      H5Pclose);
    check(H5Pset_chunk(properties.get(), 1, &chunk), parent, "create dataset", path);
    const hid_t dataset = H5Dcreate2(parent.id(), name.c_str(), row_type.file.get(), space.get(),
                                     H5P_DEFAULT, properties.get(), H5P_DEFAULT);
    return Dataset(Handle(check(dataset, parent, "create dataset", path), H5Dclose), parent, path);
}

void append_rows(const Dataset& dataset, const Table& rows) {
    const std::string& path = dataset.path();
    const Compound row_type = make_compound(dataset, path, rows);
    const std::vector<unsigned char> buffer = pack_rows(rows, row_type, path);
    const hsize_t count = row_count(rows);
    if (count == 0) return;
    const hsize_t start = dataset.rows();
    const hsize_t extent = start + count;
    check(H5Dset_extent(dataset.id(), &extent), dataset, "extend dataset", path);
    Handle file_space(check(H5Dget_space(dataset.id()), dataset, "extend dataset", path), H5Sclose);
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
          dataset, "extend dataset", path);
    Handle memory_space(
        check(H5Screate_simple(1, &count, nullptr), dataset, "extend dataset", path), H5Sclose);
    check(H5Dwrite(dataset.id(), row_type.memory.get(), memory_space.get(), file_space.get(),
                   table_transfer(dataset, path).get(), buffer.data()),
          dataset, "write dataset", path);
}

bool has_column(const Group& parent, const std::string& name, const std::string& column) {
    Dataset dataset = parent.open_dataset(name);
    Handle file_type(check(H5Dget_type(dataset.id()), dataset, "read dataset", dataset.path()),
                     H5Tclose);
    if (H5Tget_class(file_type.get()) != H5T_COMPOUND) dataset.invalid("is not a table");
    return H5Tget_member_index(file_type.get(), column.c_str()) >= 0;
}

Table read_table(const Group& parent, const std::string& name, const Table& like) {
    Dataset dataset = parent.open_dataset(name);
    const std::string& path = dataset.path();
    const size_t rows = dataset.rows();
    Handle file_type(check(H5Dget_type(dataset.id()), dataset, "read dataset", path), H5Tclose);
    if (H5Tget_class(file_type.get()) != H5T_COMPOUND) dataset.invalid("is not a table");
    for (const auto& c : like) {
        const int member = H5Tget_member_index(file_type.get(), c.name.c_str());
        if (member < 0) dataset.invalid("has no column '" + c.name + "'");
        const size_t kind = c.values.index();
        if (H5Tget_member_class(file_type.get(), static_cast<unsigned>(member)) != kind_class(kind))
            dataset.invalid("has column '" + c.name + "' that is not " + kind_name(kind));
        if (kind == kString) {
            Handle member_type(
                check(H5Tget_member_type(file_type.get(), static_cast<unsigned>(member)), dataset,
                      "read dataset", path),
                H5Tclose);
            if (check(H5Tis_variable_str(member_type.get()), dataset, "read dataset", path) <= 0)
                dataset.invalid("has column '" + c.name + "' of fixed-length strings");
        }
    }

    Compound row_type = make_compound(dataset, path, like);
    std::vector<unsigned char> buffer(rows * row_type.row_size);
    if (rows > 0)
        check(H5Dread(dataset.id(), row_type.memory.get(), H5S_ALL, H5S_ALL,
                      table_transfer(dataset, path).get(), buffer.data()),
              dataset, "read dataset", path);

    Table out = like;
    for (size_t i = 0; i < out.size(); ++i) {
        // no rows: no buffer to point into (an offset from its null data is undefined)
        const unsigned char* at = rows > 0 ? buffer.data() + row_type.offsets[i] : nullptr;
        std::visit(
            [&](auto& values) {
                using T = typename std::decay_t<decltype(values)>::value_type;
                values.resize(rows);
                for (size_t r = 0; r < rows; ++r, at += row_type.row_size) {
                    if constexpr (std::is_same_v<T, std::string>) {
                        const char* chars = nullptr;
                        std::memcpy(&chars, at, sizeof chars);
                        values[r] = chars != nullptr ? chars : "";
                    } else {
                        std::memcpy(&values[r], at, sizeof(T));
                    }
                }
            },
            out[i].values);
    }
    if (rows > 0) {
        // the vlen strings of the buffer were allocated by HDF5 and go back to it
        Handle space(check(H5Dget_space(dataset.id()), dataset, "read dataset", path), H5Sclose);
#if H5_VERSION_GE(1, 12, 0)
        H5Treclaim(row_type.memory.get(), space.get(), H5P_DEFAULT, buffer.data());
#else
        H5Dvlen_reclaim(row_type.memory.get(), space.get(), H5P_DEFAULT, buffer.data());
#endif
    }
    return out;
}

}  // namespace lav::report::h5
