// __syncthreads as the `sync` of a one-block schedule body (fa2_schedule_block, mla_schedule_block), which a host
// test runs with a std::barrier instead (tests/core/block_schedule_harness.cpp).
#pragma once

namespace ddtree {

struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};

}  // namespace ddtree
