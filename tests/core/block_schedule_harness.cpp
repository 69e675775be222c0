// Runs kernels/mla_schedule.h's one-block schedule (mla_schedule_block, the body of the CUDA kernel
// kernels/mla_schedule.cu) on kThreads host threads with a std::barrier for __syncthreads, so that its parallel
// structure (runs of requests, the scan across threads, the strided tails) is checked on a machine without a GPU.
// stdin: cases "bs n heads cluster_size clusters merge_slots len_0 .. len_{bs-1}"; stdout per case: the work count,
// then the 14 arrays (8 of works, work_indptr, 5 of merges). tests/core/test_block_schedules.py compares them
// with the CPU op.
#include <barrier>
#include <cstdint>
#include <iostream>
#include <thread>
#include <vector>

#include "mla_schedule.h"

namespace {

constexpr int kThreads = 256;

struct BarrierSync {
  std::barrier<>* barrier;
  void operator()() const { barrier->arrive_and_wait(); }
};

}  // namespace

int main() {
  int64_t bs, n, heads, cluster_size, clusters, merge_slots;
  while (std::cin >> bs >> n >> heads >> cluster_size >> clusters >> merge_slots) {
    std::vector<int64_t> lens(bs), kv(bs);
    int64_t at = 0;
    for (int64_t b = 0; b < bs; ++b) std::cin >> lens[b], kv[b] = at, at += lens[b];
    const ddtree::MlaShape s{n, heads, cluster_size, clusters};
    const int64_t max_works = s.tiles() * bs + 2 * clusters;
    std::vector<int32_t> ws(9 * (max_works + clusters + 1) + 5 * merge_slots, -7);
    ddtree::MlaScheduleOut o;
    int32_t** arrays[14] = {&o.q_indptr, &o.kv_indptr, &o.partial_indptr, &o.q_len, &o.kv_len, &o.q_start,
                            &o.kv_start, &o.kv_end, &o.work_indptr, &o.merge_start, &o.merge_end,
                            &o.merge_partial_start, &o.merge_partial_end, &o.merge_stride};
    int32_t* p = ws.data();
    for (int i = 0; i < 14; ++i) *arrays[i] = p, p += i < 8 ? max_works : i == 8 ? clusters + 1 : merge_slots;
    static ddtree::MlaBlockShared<kThreads> sh;
    std::barrier<> barrier(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ddtree::mla_schedule_block<kThreads>(t, lens.data(), kv.data(), static_cast<int>(bs), s, merge_slots, o, sh,
                                             BarrierSync{&barrier});
      });
    for (auto& t : threads) t.join();
    const int64_t works = o.work_indptr[clusters];
    std::cout << works;
    for (int i = 0; i < 14; ++i) {
      const int64_t size = i < 8 ? works : i == 8 ? clusters + 1 : merge_slots;
      for (int64_t j = 0; j < size; ++j) std::cout << ' ' << (*arrays[i])[j];
    }
    std::cout << '\n';
  }
  return 0;
}
