// tests/fuzz/libfuzzer.cpp — libFuzzer's entry point, calling the target LAV_FUZZ_TARGET names
// (one executable per target, built with -DLAV_FUZZ=ON).
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return lav::fuzz::LAV_FUZZ_TARGET(data, size);
}
