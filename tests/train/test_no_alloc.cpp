// test_no_alloc: after the first steps, a training step (forward, backward, clipping, optimizer
// update) makes no heap allocation, in fp32 and bf16, with AdamW and LAMB, with 1 and 2 threads.
// The check is an interposer on malloc/calloc/realloc/posix_memalign/aligned_alloc/memalign
// (operator new ends in malloc) that counts calls from every thread while a flag is set, and
// attributes each to megascale or to a library by its call stack: allocations with oneDNN or
// libgomp on the stack are the libraries' own (oneDNN's sgemm API allocates its packing buffer per
// call and its primitive execute builds an argument map; libgomp allocates the team descriptor of
// one-thread parallel regions), counted apart and printed. megascale's own count must be zero.
#include <gtest/gtest.h>

#include <dlfcn.h>     // dladdr
#include <execinfo.h>  // backtrace

#include <atomic>
#include <cstring>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include "common/test_util.h"
#include "train/trainer.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0}, g_lib_allocs{0};
thread_local bool t_in_count = false;  // backtrace/dladdr may allocate: do not recurse
inline void count() {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_count) return;
  t_in_count = true;
  void* frames[48];
  const int n = backtrace(frames, 48);
  bool lib = false;
  for (int i = 1; i < n && !lib; i++) {
    Dl_info info;
    if (dladdr(frames[i], &info) && info.dli_fname)
      lib = std::strstr(info.dli_fname, "libdnnl") || std::strstr(info.dli_fname, "libgomp");
  }
  (lib ? g_lib_allocs : g_allocs).fetch_add(1, std::memory_order_relaxed);
  t_in_count = false;
}
}  // namespace

extern "C" {
void* malloc(size_t n) { count(); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { count(); return __libc_realloc(p, n); }
void* memalign(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
void* aligned_alloc(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
int posix_memalign(void** out, size_t al, size_t n) {
  count();
  void* p = __libc_memalign(al, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}

using namespace ms;

namespace {

struct Case {
  const char* precision;
  const char* optimizer;
  int threads;
};

class NoAlloc : public ::testing::TestWithParam<Case> {};

TEST_P(NoAlloc, StepAllocatesNothingAfterWarmup) {
  const Case c = GetParam();
  ms::testing::with_threads(c.threads, [&] {
    Config cfg;
    cfg.model.n_layer = 2; cfg.model.n_embd = 64; cfg.model.n_head = 4;
    cfg.model.vocab_size = 300; cfg.model.max_seq_len = 32;
    cfg.train.batch_size = 2; cfg.train.seq_len = 32; cfg.train.grad_accum = 2;
    cfg.train.steps = 10; cfg.train.precision = *ms::dtype_from_name(c.precision);
    cfg.train.threads = c.threads;
    cfg.optim.name = *ms::parse_config_enum<ms::OptimizerKind>(c.optimizer);
    cfg.data.train = "unused";
    cfg.validate();
    Trainer tr(cfg);
    uint64_t x = 1;
    auto next = [&](int* in, int* tg) {
      for (int i = 0; i < cfg.train.batch_size * cfg.train.seq_len; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        in[i] = static_cast<int>((x >> 33) % 300);
        tg[i] = static_cast<int>((x >> 17) % 300);
      }
    };
    std::function<void(int*, int*)> fn = next;  // built before counting
    for (int s = 0; s < 2; s++) tr.train_step(fn);
    { void* f[4]; backtrace(f, 4); }  // loads libgcc's unwinder before counting
    g_allocs = 0;
    g_lib_allocs = 0;
    g_counting = true;
    StepStats st;
    for (int s = 0; s < 3; s++) st = tr.train_step(fn);
    g_counting = false;
    EXPECT_EQ(g_allocs.load(), 0) << "megascale's own heap allocations during 3 steps after warm-up";
    std::printf("3 steps: %ld allocations by megascale, %ld inside oneDNN/libgomp\n", g_allocs.load(),
                g_lib_allocs.load());
    EXPECT_TRUE(std::isfinite(st.loss));
    // The interposer works: a plain allocation while counting is seen.
    g_allocs = 0;
    g_counting = true;
    std::vector<int>* v = new std::vector<int>(100);
    g_counting = false;
    delete v;
    EXPECT_GE(g_allocs.load(), 1) << "the malloc interposer did not count a new";
  });
}

INSTANTIATE_TEST_SUITE_P(Steps, NoAlloc,
                         ::testing::Values(Case{"fp32", "adamw", 1}, Case{"fp32", "lamb", 2},
                                           Case{"bf16", "adamw", 2}, Case{"bf16", "lamb", 1}),
                         [](const auto& info) {
                           return std::string(info.param.precision) + "_" + info.param.optimizer + "_t" +
                                  std::to_string(info.param.threads);
                         });

}  // namespace
