// src/report/intermediates.cpp — writes and reads the per-case files of --dump-intermediates
// (layout in reports/SCHEMA.md).
#include "report/intermediates.h"

#include <cctype>

#include "report/h5.h"

namespace lav::report {
namespace {

constexpr int32_t kIntermediatesVersion = 1;

void write_variant(const h5::File& file, const Intermediates& d) {
    const h5::Group group = file.create_group(d.variant);
    h5::write_attribute(group, "family", d.family);
    h5::write_attribute(group, "input_dtype", d.input_dtype);
    h5::write_attribute(group, "state_dtype", d.state_dtype);
    h5::write_attribute(group, "layout", d.layout);
    h5::write_attribute(group, "shape", d.shape);
    h5::write_attribute(group, "chunk_size", d.chunk_size);
    // fp32 holds every fp32, fp16 and bf16 value exactly; the attribute keeps the stored dtype
    const h5::Dataset h = h5::write_array(group, "h", d.dims, d.h, /*single=*/true);
    h5::write_attribute(h, "dtype", d.state_dtype);
    h5::write_array(group, "h_ref", d.dims, d.h_ref, /*single=*/false);
    std::vector<int64_t> chunk, sequence, position;
    std::vector<double> rel_rmse;
    for (const ChunkStateRow& row : d.chunks) {
        chunk.push_back(row.chunk);
        sequence.push_back(row.sequence);
        position.push_back(row.position);
        rel_rmse.push_back(row.rel_rmse);
    }
    h5::write_table(
        group, "chunks",
        {{"chunk", chunk}, {"sequence", sequence}, {"position", position}, {"rel_rmse", rel_rmse}});
}

}  // namespace

std::string intermediates_file_name(const std::string& case_id) {
    std::string name = case_id;
    for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '=' &&
            ch != '-')
            ch = '_';
    return name + ".h5";
}

void write_intermediates(const std::string& path, const std::vector<Intermediates>& dumps) {
    h5::write_file_atomically(path, "intermediates file", [&](const std::string& temporary) {
        h5::File file = h5::File::create(temporary);
        h5::write_attribute(file, "intermediates_version", kIntermediatesVersion);
        h5::write_attribute(file, "case_id", dumps.empty() ? std::string() : dumps[0].case_id);
        for (const Intermediates& d : dumps) write_variant(file, d);
        file.close();
    });
}

std::vector<Intermediates> read_intermediates(const std::string& path) {
    const h5::File file = h5::File::open_read_only(path);
    if (!h5::has_attribute(file, "intermediates_version"))
        file.invalid("is not an intermediates file of lav run --dump-intermediates");
    const std::string case_id = h5::read_attribute<std::string>(file, "case_id");
    std::vector<Intermediates> out;
    // the root as a group: a file handle cannot list its links in creation order
    const h5::Group root = file.open_group(".");
    for (const std::string& variant : root.link_names()) {
        const h5::Group group = root.open_group(variant);
        Intermediates d;
        d.case_id = case_id;
        d.variant = variant;
        d.family = h5::read_attribute<std::string>(group, "family");
        d.input_dtype = h5::read_attribute<std::string>(group, "input_dtype");
        d.state_dtype = h5::read_attribute<std::string>(group, "state_dtype");
        d.layout = h5::read_attribute<std::string>(group, "layout");
        d.shape = h5::read_attribute<std::string>(group, "shape");
        d.chunk_size = h5::read_attribute<int64_t>(group, "chunk_size");
        const h5::Dataset h = group.open_dataset("h");
        d.dims = h.dims();
        d.h = h5::read_array(h);
        d.h_ref = h5::read_array(group.open_dataset("h_ref"));
        const h5::Table table = h5::read_table(group, "chunks",
                                               {{"chunk", std::vector<int64_t>{}},
                                                {"sequence", std::vector<int64_t>{}},
                                                {"position", std::vector<int64_t>{}},
                                                {"rel_rmse", std::vector<double>{}}});
        const auto& chunk = h5::column<int64_t>(table, "chunk");
        for (size_t i = 0; i < chunk.size(); ++i)
            d.chunks.push_back({chunk[i], h5::column<int64_t>(table, "sequence")[i],
                                h5::column<int64_t>(table, "position")[i],
                                h5::column<double>(table, "rel_rmse")[i]});
        out.push_back(std::move(d));
    }
    return out;
}

}  // namespace lav::report
