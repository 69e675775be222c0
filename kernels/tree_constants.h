// The numbers every backend and Python share, in one place: status flags and tree sizes. C++/CUDA include this
// header; sglang_ddtree/flags.py and sglang_ddtree/sizes.py read their values from it (_build.header_constants),
// and tests/core/test_shared_constants.py fails if another source defines one of these facts again.
#pragma once

#include <cstdint>

namespace ddtree {

// A request's status bits (the int32 `flags` outputs; sglang_ddtree/flags.py says what each one means).
constexpr int32_t kFlagNonfiniteInput = 1;
constexpr int32_t kFlagHeapExhausted = 2;
constexpr int32_t kFlagMalformedTree = 4;
constexpr int32_t kFlagNonfiniteTarget = 8;
constexpr int32_t kFlagUnsortedInput = 16;

// Tree sizes, in slots n = budget + 1 per request. The CUDA builder keeps one mask word per lane and 10-bit node
// indices in its frontier metadata; the accept and commit kernels, and every backend's builder (the B·n² mask
// memory), stop at kMaxNodes.
constexpr int kMaxTreeSlots = 1024;
constexpr int kMaxNodes = 4096;

}  // namespace ddtree
