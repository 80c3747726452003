# cmake/LavDependencies.cmake — finds LibTorch, HDF5, Boost, GoogleTest, toml++ and decides CUDA once.
#
# LibTorch comes from Torch_DIR, else from the `torch` package of LAV_PYTHON (the project venv
# when present). A CUDA build of LibTorch is used only when nvcc is found and its CUDA
# libraries resolve; otherwise lav links the CPU half of LibTorch (libtorch_cpu, libc10),
# which needs none of the CUDA runtime libraries.

find_package(Threads REQUIRED)

# ---- LibTorch ----
if(NOT Torch_DIR)
    if(NOT LAV_PYTHON)
        if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
            set(LAV_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python")
        else()
            find_program(LAV_PYTHON NAMES python3 python)
        endif()
    endif()
    # find_spec locates the package without importing it (import needs its Python deps)
    execute_process(
        COMMAND "${LAV_PYTHON}" -c
            "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.dirname(s.origin) if s else '')"
        OUTPUT_VARIABLE _lav_torch_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT _lav_torch_root)
        message(FATAL_ERROR "LibTorch not found: set -DTorch_DIR=<libtorch>/share/cmake/Torch, "
                            "or run tools/setup.sh to install torch into .venv")
    endif()
    set(Torch_DIR "${_lav_torch_root}/share/cmake/Torch")
endif()
get_filename_component(LAV_TORCH_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
file(STRINGS "${Torch_DIR}/TorchConfigVersion.cmake" _lav_tv REGEX "PACKAGE_VERSION \"")
string(REGEX REPLACE ".*\"(.*)\".*" "\\1" LAV_TORCH_VERSION "${_lav_tv}")

# ---- CUDA decision ----
set(LAV_CUDA OFF)
set(_lav_cuda_why "")
if(NOT LAV_ENABLE_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    check_language(CUDA)
    set(_lav_torch_cuda "${LAV_TORCH_ROOT}/lib/libtorch_cuda.so")
    if(NOT CMAKE_CUDA_COMPILER)
        set(_lav_cuda_why "no nvcc")
    elseif(NOT EXISTS "${_lav_torch_cuda}")
        set(_lav_cuda_why "LibTorch is a CPU build")
    else()
        execute_process(COMMAND ldd "${_lav_torch_cuda}" OUTPUT_VARIABLE _lav_ldd ERROR_QUIET)
        if(_lav_ldd MATCHES "not found")
            set(_lav_cuda_why "LibTorch's CUDA libraries do not resolve")
        else()
            set(LAV_CUDA ON)
        endif()
    endif()
    if(LAV_ENABLE_CUDA STREQUAL "ON" AND NOT LAV_CUDA)
        message(FATAL_ERROR "LAV_ENABLE_CUDA=ON but CUDA cannot be used: ${_lav_cuda_why}")
    endif()
endif()

# the GPUs the CUDA build compiles for: Hopper first, Ampere too (tests/cuda compiles the kernels
# for them in builds without CUDA, where nvcc is there)
set(LAV_CUDA_ARCHITECTURES 80 90)
if(LAV_CUDA)
    # static kernels also go into liblav_ops.so, so all code is PIC
    if(NOT CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES ${LAV_CUDA_ARCHITECTURES})
    endif()
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
    set(CMAKE_CUDA_STANDARD 17)
    enable_language(CUDA)
    # LibTorch's CMake adds its own -gencode flags from TORCH_CUDA_ARCH_LIST
    if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
        set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
    endif()
    find_package(Torch REQUIRED)
    add_library(lav_torch INTERFACE)
    target_include_directories(lav_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
    target_link_libraries(lav_torch INTERFACE ${TORCH_LIBRARIES})
else()
    # the CPU half of LibTorch: headers plus libtorch_cpu and libc10
    find_library(LAV_TORCH_CPU_LIB torch_cpu PATHS "${LAV_TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
    find_library(LAV_C10_LIB c10 PATHS "${LAV_TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
    add_library(lav_torch INTERFACE)
    target_include_directories(lav_torch SYSTEM INTERFACE
        "${LAV_TORCH_ROOT}/include" "${LAV_TORCH_ROOT}/include/torch/csrc/api/include")
    target_link_libraries(lav_torch INTERFACE "${LAV_TORCH_CPU_LIB}" "${LAV_C10_LIB}" Threads::Threads)
    set_property(TARGET lav_torch APPEND PROPERTY INTERFACE_LINK_OPTIONS
        "LINKER:-rpath,${LAV_TORCH_ROOT}/lib")
endif()

# ---- HDF5 (C API), Boost.Program_options, GoogleTest, toml++ ----
find_package(HDF5 REQUIRED COMPONENTS C)
# some Boost installs ship the library without its CMake package: fall back to the files
if(POLICY CMP0167)
    cmake_policy(SET CMP0167 NEW)
endif()
find_package(Boost QUIET COMPONENTS program_options)
if(NOT TARGET Boost::program_options)
    find_path(LAV_BOOST_INCLUDE boost/program_options.hpp)
    find_library(LAV_BOOST_PO_LIB boost_program_options)
    # a host with Boost's headers but not this library builds it from its sources, which
    # tools/devdeps.sh puts in .devdeps/ (they must be of the same Boost version as the headers)
    set(LAV_BOOST_PO_SOURCES "${CMAKE_SOURCE_DIR}/.devdeps/boost_program_options/src"
        CACHE PATH "Boost.Program_options sources, built when the library is missing")
    if(LAV_BOOST_INCLUDE AND NOT LAV_BOOST_PO_LIB AND EXISTS "${LAV_BOOST_PO_SOURCES}/cmdline.cpp")
        file(GLOB _lav_po_sources "${LAV_BOOST_PO_SOURCES}/*.cpp")
        add_library(lav_boost_program_options STATIC ${_lav_po_sources})
        target_include_directories(lav_boost_program_options SYSTEM PUBLIC "${LAV_BOOST_INCLUDE}")
        target_compile_options(lav_boost_program_options PRIVATE -w)
        add_library(Boost::program_options ALIAS lav_boost_program_options)
        set(Boost_VERSION "${Boost_VERSION} (program_options built from ${LAV_BOOST_PO_SOURCES})")
    elseif(NOT LAV_BOOST_INCLUDE OR NOT LAV_BOOST_PO_LIB)
        message(FATAL_ERROR "Boost.Program_options not found (headers: ${LAV_BOOST_INCLUDE}, "
                            "library: ${LAV_BOOST_PO_LIB}); the headers alone are not enough. "
                            "Install libboost-program-options-dev, set "
                            "-DLAV_BOOST_PO_LIB=<libboost_program_options.so>, or run "
                            "tools/devdeps.sh to build it from its sources")
    else()
        add_library(Boost::program_options UNKNOWN IMPORTED)
        set_target_properties(Boost::program_options PROPERTIES IMPORTED_LOCATION
            "${LAV_BOOST_PO_LIB}" INTERFACE_INCLUDE_DIRECTORIES "${LAV_BOOST_INCLUDE}")
        set(Boost_VERSION "(library ${LAV_BOOST_PO_LIB})")
    endif()
endif()
find_package(GTest REQUIRED)
find_path(LAV_TOMLPP_INCLUDE toml++/toml.h
          HINTS "${CMAKE_SOURCE_DIR}/.devdeps/root/usr/include" REQUIRED)
add_library(lav_tomlplusplus INTERFACE)
target_include_directories(lav_tomlplusplus SYSTEM INTERFACE "${LAV_TOMLPP_INCLUDE}")

# ---- Python for provider modules: the interpreter of LAV_PYTHON (the project venv), embedded ----
set(LAV_ENABLE_PYTHON AUTO CACHE STRING "Embed Python for provider modules: AUTO, ON or OFF")
set(LAV_PYTHON_EMBED OFF)
set(LAV_PYTHON_DECISION "off (LAV_ENABLE_PYTHON=OFF)")
if(NOT LAV_ENABLE_PYTHON STREQUAL "OFF")
    if(NOT LAV_PYTHON)
        find_program(LAV_PYTHON NAMES python3 python)
    endif()
    set(Python3_EXECUTABLE "${LAV_PYTHON}")
    find_package(Python3 QUIET COMPONENTS Interpreter Development.Embed)
    if(Python3_Development.Embed_FOUND)
        set(LAV_PYTHON_EMBED ON)
        set(LAV_PYTHON_EMBED_EXECUTABLE "${LAV_PYTHON}")
        set(LAV_PYTHON_DECISION "on (Python ${Python3_VERSION}, ${LAV_PYTHON})")
    else()
        set(LAV_PYTHON_DECISION
            "off (no headers and library of ${LAV_PYTHON}: install python3-dev or set LAV_PYTHON)")
        if(LAV_ENABLE_PYTHON STREQUAL "ON")
            message(FATAL_ERROR "LAV_ENABLE_PYTHON=ON but ${LAV_PYTHON_DECISION}")
        endif()
    endif()
endif()

find_package(Git QUIET)
set(LAV_COMMIT "" CACHE STRING
    "lav's commit, recorded in reports, where the source folder is not lav's own git checkout")
set(LAV_GIT_COMMIT "unknown")
if(LAV_COMMIT)
    set(LAV_GIT_COMMIT "${LAV_COMMIT}")
elseif(GIT_FOUND)
    # a copy of lav inside another checkout must not take that checkout's commit for its own
    execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --show-toplevel
                    WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
                    OUTPUT_VARIABLE _lav_top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD
                    WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
                    OUTPUT_VARIABLE _lav_commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    file(REAL_PATH "${CMAKE_SOURCE_DIR}" _lav_source)
    if(_lav_top)
        file(REAL_PATH "${_lav_top}" _lav_top)
    endif()
    if(_lav_commit AND _lav_top STREQUAL _lav_source)
        set(LAV_GIT_COMMIT "${_lav_commit}")
        # a new commit configures again on the next build, so a report never names the commit
        # an earlier configure saw: HEAD, the branch it points at, and the packed refs
        execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --absolute-git-dir
                        WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
                        OUTPUT_VARIABLE _lav_git_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        execute_process(COMMAND "${GIT_EXECUTABLE}" symbolic-ref -q HEAD
                        WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}"
                        OUTPUT_VARIABLE _lav_branch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        foreach(_lav_ref HEAD "${_lav_branch}" packed-refs)
            if(_lav_ref AND EXISTS "${_lav_git_dir}/${_lav_ref}")
                set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                             "${_lav_git_dir}/${_lav_ref}")
            endif()
        endforeach()
    endif()
endif()

if(LAV_CUDA)
    message(STATUS "lav: CUDA on (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
elseif(_lav_cuda_why)
    message(STATUS "lav: CUDA off (${_lav_cuda_why})")
else()
    message(STATUS "lav: CUDA off (LAV_ENABLE_CUDA=OFF)")
endif()
message(STATUS "lav: LibTorch ${LAV_TORCH_VERSION} at ${LAV_TORCH_ROOT}")
message(STATUS "lav: Python providers ${LAV_PYTHON_DECISION}")
message(STATUS "lav: HDF5 ${HDF5_VERSION}, Boost ${Boost_VERSION}, toml++ at ${LAV_TOMLPP_INCLUDE}")
