// Runs the one-block schedule bodies of two CUDA kernels — fa2_schedule_block (kernels/fa2_schedule.h, the body of
// kernels/fa2_schedule.cu) and mla_schedule_block (kernels/mla_schedule.h, of kernels/mla_schedule.cu) — on
// kThreads host threads with a std::barrier for __syncthreads, so that their parallel structure (runs of requests,
// reductions and scans across threads, strided tails) is checked on a machine without a GPU.
// stdin, one case a line:
//   "fa2 bs n tiles kmax min_chunk len_0 .. len_{bs-1}" -> chunk, o_indptr [bs + 1], merge_indptr [bs n + 1],
//                                                          valid [bs tiles kmax] (0/1)
//   "mla bs n heads cluster_size clusters merge_slots len_0 ..." -> the work count, then the 14 arrays (8 of works,
//                                                                    work_indptr, 5 of merges)
// tests/core/test_block_schedules.py compares each line with the CPU op.
#include <barrier>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fa2_schedule.h"
#include "mla_schedule.h"

namespace {

constexpr int kThreads = 256;

struct BarrierSync {
  std::barrier<>* barrier;
  void operator()() const { barrier->arrive_and_wait(); }
};

template <class Body>
void on_block(Body body) {
  std::barrier<> barrier(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { body(t, BarrierSync{&barrier}); });
  for (auto& t : threads) t.join();
}

std::vector<int64_t> read_lens(int64_t bs) {
  std::vector<int64_t> lens(bs);
  for (auto& x : lens) std::cin >> x;
  return lens;
}

void print(const int32_t* a, int64_t size) {
  for (int64_t j = 0; j < size; ++j) std::cout << ' ' << a[j];
}

void fa2() {
  int64_t bs, n, tiles, kmax, min_chunk;
  std::cin >> bs >> n >> tiles >> kmax >> min_chunk;
  const std::vector<int64_t> lens = read_lens(bs);
  const int live = static_cast<int>(bs * tiles * kmax);
  std::vector<int32_t> o(bs + 1, -7), merge(bs * n + 1, -7), chunk(1, -7);
  std::unique_ptr<bool[]> valid(new bool[live]);
  static ddtree::Fa2BlockShared<kThreads> sh;
  on_block([&](int t, BarrierSync sync) {
    ddtree::fa2_schedule_block<kThreads>(t, lens.data(), static_cast<int>(bs), static_cast<int>(n),
                                         static_cast<int>(tiles), static_cast<int>(kmax), static_cast<int>(min_chunk),
                                         valid.get(), live, o.data(), merge.data(), chunk.data(), sh, sync);
  });
  std::cout << chunk[0];
  print(o.data(), bs + 1);
  print(merge.data(), bs * n + 1);
  for (int e = 0; e < live; ++e) std::cout << ' ' << (valid[e] ? 1 : 0);
  std::cout << '\n';
}

void mla() {
  int64_t bs, n, heads, cluster_size, clusters, merge_slots;
  std::cin >> bs >> n >> heads >> cluster_size >> clusters >> merge_slots;
  const std::vector<int64_t> lens = read_lens(bs);
  std::vector<int64_t> kv(bs);
  for (int64_t b = 0, at = 0; b < bs; at += lens[b], ++b) kv[b] = at;
  const ddtree::MlaShape s{n, heads, cluster_size, clusters};
  const int64_t max_works = s.tiles() * bs + 2 * clusters;
  std::vector<int32_t> ws(8 * max_works + clusters + 1 + 5 * merge_slots, -7);
  ddtree::MlaScheduleOut o;
  int32_t** arrays[14] = {&o.q_indptr, &o.kv_indptr, &o.partial_indptr, &o.q_len, &o.kv_len, &o.q_start,
                          &o.kv_start, &o.kv_end, &o.work_indptr, &o.merge_start, &o.merge_end,
                          &o.merge_partial_start, &o.merge_partial_end, &o.merge_stride};
  int32_t* p = ws.data();
  for (int i = 0; i < 14; ++i) *arrays[i] = p, p += i < 8 ? max_works : i == 8 ? clusters + 1 : merge_slots;
  static ddtree::MlaBlockShared<kThreads> sh;
  on_block([&](int t, BarrierSync sync) {
    ddtree::mla_schedule_block<kThreads>(t, lens.data(), kv.data(), static_cast<int>(bs), s, merge_slots, o, sh, sync);
  });
  const int64_t works = o.work_indptr[clusters];
  std::cout << works;
  for (int i = 0; i < 14; ++i) print(*arrays[i], i < 8 ? works : i == 8 ? clusters + 1 : merge_slots);
  std::cout << '\n';
}

}  // namespace

int main() {
  std::string kind;
  while (std::cin >> kind) {
    if (kind == "fa2") fa2();
    else if (kind == "mla") mla();
    else return 2;
  }
  return 0;
}
