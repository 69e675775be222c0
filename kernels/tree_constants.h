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

// Tree sizes. A tree has n = budget + 1 slots per request. Every builder takes budgets up to kMaxBudget (it bounds
// the B·n² mask memory); the CUDA builder holds n <= kMaxTreeSlots (one mask word per lane, 10-bit node indices
// in its frontier metadata); the CUDA accept and commit kernels walk n <= kMaxNodes.
constexpr int kMaxBudget = 4096;
constexpr int kMaxTreeSlots = 1024;
constexpr int kMaxNodes = 4096;

}  // namespace ddtree
