# cmake/LavLayering.cmake — the include rules that keep lav's folders in one direction, checked
# at configure time so that a file breaking them does not build.
#
#   src/core     includes nothing else of src/: it is the foundation of kernels/ and reference/
#   kernels/     includes src/core and kernels/ only (never the harness, never reference/);
#                kernels/ops/ is where kernels meet the declarations as PyTorch ops, like the harness
#   reference/   includes src/core and reference/ only (independent of the kernels)
#   src/         reaches no kernel code and no CUDA header: kernels arrive as rows

# lav_forbid_includes(<folder> <regex> <why> [<skipped subfolder>]) — fails configure on a quoted
# or angled include under <folder> whose path matches <regex>.
function(lav_forbid_includes folder regex why)
    set(skipped "${ARGN}")
    file(GLOB_RECURSE files "${PROJECT_SOURCE_DIR}/${folder}/*.h" "${PROJECT_SOURCE_DIR}/${folder}/*.cpp"
         "${PROJECT_SOURCE_DIR}/${folder}/*.cuh" "${PROJECT_SOURCE_DIR}/${folder}/*.cu")
    foreach(file IN LISTS files)
        if(skipped AND file MATCHES "^${PROJECT_SOURCE_DIR}/${folder}/${skipped}/")
            continue()
        endif()
        file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
        foreach(line IN LISTS includes)
            string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]*)[>\"].*" "\\1" path "${line}")
            if(path MATCHES "${regex}")
                file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${file}")
                message(FATAL_ERROR "${rel} includes \"${path}\": ${why}")
            endif()
        endforeach()
    endforeach()
endfunction()

set(_lav_src_parts "^(src/|harness/|scenario/|metrics/|report/|trace/|cli/|providers/)")
lav_forbid_includes(src/core "${_lav_src_parts}"
    "src/core is the foundation of kernels/ and reference/ and includes nothing else of src/")
lav_forbid_includes(kernels "${_lav_src_parts}|^reference/"
    "kernels/ may include src/core and kernels/ only" ops)
lav_forbid_includes(reference "${_lav_src_parts}|^kernels/|^common/"
    "reference/ may include src/core and reference/ only")
foreach(part IN ITEMS harness scenario metrics report trace cli providers)
    lav_forbid_includes(src/${part} "^kernels/|^common/|^cuda|\\.cuh$"
        "src/ reaches kernels only as rows (core/row.h), never their headers or CUDA's")
endforeach()
