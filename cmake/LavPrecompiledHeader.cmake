# One precompiled ATen header for the whole build: each gch is ~350 MB, so a copy per target
# (45 targets) would need 16 GB of disk; every C++ target reuses lav_core's instead.

# lav_share_precompiled_header(<dir>) — every C++ library or executable under <dir>; each must
# link LibTorch (through lav_core).
function(lav_share_precompiled_header dir)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        get_target_property(type ${target} TYPE)
        if(target STREQUAL "lav_core" OR NOT type MATCHES "^(STATIC_LIBRARY|EXECUTABLE)$")
            continue()
        endif()
        target_precompile_headers(${target} REUSE_FROM lav_core)
        # a PIC build compiles lav_core with -fPIC and executables with -fPIE, and gcc refuses
        # a header precompiled under the other (-Winvalid-pch): executables take -fPIC too
        if(CMAKE_POSITION_INDEPENDENT_CODE AND type STREQUAL "EXECUTABLE")
            target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
        endif()
    endforeach()
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(subdir IN LISTS subdirs)
        lav_share_precompiled_header("${subdir}")
    endforeach()
endfunction()
