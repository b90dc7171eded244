// alloc_interposer: counts heap allocations and attributes each one to the code that asked for it.
// Include in exactly ONE translation unit of a binary (it defines malloc, calloc, realloc,
// memalign, aligned_alloc and posix_memalign; operator new ends in malloc). Used by
// tests/train/test_no_alloc.cpp and its per-rank worker tests/tools/no_alloc_rank.cpp.
//
// Attribution: each allocation made while counting is on walks its call stack (backtrace) from the
// innermost frame outwards, skipping frames that only allocate on behalf of their caller:
//  - the interposer itself;
//  - libc, libstdc++, libgcc_s, libm, the dynamic loader, libfmt, libspdlog;
//  - template code of std::, __gnu_cxx::, fmt::, spdlog::, nlohmann:: instantiated in the binary.
// The first frame left is the owner:
//  - a frame of the executable (megascale's code, statically linked, or the test's): "project";
//    this includes OpenMP-outlined bodies (`f._omp_fn.N`) running on a libgomp worker thread, whose
//    outer frames are libgomp's: a vector resized inside `#pragma omp parallel` is the project's;
//  - a frame of any other shared library (libgomp, libdnnl, gloo, MPI, ...): "library", counted
//    apart (libgomp allocates the team of a one-thread parallel region, oneDNN's sgemm its packing
//    buffer per call: the libraries' own policy, not ours).
// Executable frames are named from the binary's own symbol table (.symtab of /proc/self/exe, read
// once by init(), so no lookup allocates); library frames by dladdr.
// The first kMaxRecords project allocations keep their stacks; report() names their owners
// (demangled function, file:line by addr2line) after counting stops.
#pragma once
#include <cxxabi.h>    // abi::__cxa_demangle
#include <dlfcn.h>     // dladdr
#include <elf.h>       // Elf64_Ehdr, Elf64_Shdr, Elf64_Sym
#include <execinfo.h>  // backtrace
#include <unistd.h>    // getpid

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace ms::alloc_check {

struct Counts {
  long project = 0;  // owner: the executable's own code (megascale or test)
  long library = 0;  // owner: a shared library (libgomp, libdnnl, ...)
  long unowned = 0;  // no owner frame found (every frame transparent or unknown)
};

namespace detail {

constexpr int kMaxFrames = 64;
constexpr int kMaxRecords = 64;

struct Sym {
  uintptr_t lo, hi;
  const char* name;  // mangled, points into g_symtab_file
};
// One distinct owner call site of project allocations: how many, and the first one's stack.
struct Record {
  std::atomic<uintptr_t> site{0};
  std::atomic<long> count{0};
  std::atomic<bool> filled{false};
  int n = 0;
  int owner = -1;  // index into frames
  void* frames[kMaxFrames];
};

inline std::string g_symtab_file;  // /proc/self/exe, kept alive for the names
inline std::vector<Sym> g_syms;
inline uintptr_t g_exe_base = 0;
inline bool g_exe_pie = true;
inline std::atomic<bool> g_on{false};
inline std::atomic<long> g_project{0}, g_library{0}, g_unowned{0};
inline std::atomic<int> g_nrec{0};
inline std::atomic<int> g_inflight{0};  // on_alloc calls past the on/off check (stop() waits for them)
inline Record g_rec[kMaxRecords];
// Up to 8 distinct owner libraries (dli_fname pointers, owned by the loader) and their counts.
inline std::atomic<const char*> g_lib_name[8];
inline std::atomic<long> g_lib_count[8];
inline thread_local bool t_inside = false;  // backtrace/dladdr may allocate: do not recurse

inline bool starts_with(const char* s, const char* p) { return std::strncmp(s, p, std::strlen(p)) == 0; }

// The interposer's own frames.
inline bool is_interposer(const char* n) {
  for (const char* x : {"malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign"})
    if (std::strcmp(n, x) == 0) return true;
  return starts_with(n, "_ZN2ms11alloc_check");
}

// Template code of utility libraries instantiated in the executable: allocates for its caller.
inline bool is_transparent_template(const char* n) {
  for (const char* p : {"_ZNSt", "_ZNKSt", "_ZSt", "_ZNSa", "_ZNKSa", "_ZNSs", "_ZNKSs", "_ZNSi", "_ZNSo",
                        "_ZN9__gnu_cxx", "_ZNK9__gnu_cxx", "_ZN3fmt", "_ZNK3fmt", "_ZN6spdlog", "_ZNK6spdlog",
                        "_ZN8nlohmann", "_ZNK8nlohmann", "_ZZNSt", "_ZZN3fmt"})
    if (starts_with(n, p)) return true;
  return false;
}

inline bool is_transparent_library(const char* fname) {
  for (const char* p : {"/libc.so", "/libstdc++", "/libgcc_s", "/libm.so", "/ld-linux", "/libfmt", "/libspdlog",
                        "/libpthread", "/libdl.so"})
    if (std::strstr(fname, p)) return true;
  return false;
}

inline const Sym* find_sym(uintptr_t addr) {
  auto it = std::upper_bound(g_syms.begin(), g_syms.end(), addr, [](uintptr_t a, const Sym& s) { return a < s.lo; });
  if (it == g_syms.begin()) return nullptr;
  --it;
  return addr < it->hi ? &*it : nullptr;
}

// Call sites: a return address points after the call instruction.
inline uintptr_t call_site(void* ret) { return reinterpret_cast<uintptr_t>(ret) - 1; }

enum class Owner { kProject, kLibrary, kNone };

// The owner frame of a stack (see the file comment); lib = its library's file name.
inline Owner classify(void* const* fr, int n, int& owner, const char*& lib) {
  for (int i = 0; i < n; i++) {
    const uintptr_t a = call_site(fr[i]);
    Dl_info info;
    if (!dladdr(reinterpret_cast<void*>(a), &info) || !info.dli_fname) continue;  // JIT code: no owner
    if (reinterpret_cast<uintptr_t>(info.dli_fbase) == g_exe_base) {
      const Sym* s = find_sym(g_exe_pie ? a - g_exe_base : a);
      if (s && (is_interposer(s->name) || is_transparent_template(s->name))) continue;
      owner = i;
      return Owner::kProject;  // including a frame of the executable without a symbol
    }
    if (is_transparent_library(info.dli_fname)) continue;
    owner = i;
    lib = info.dli_fname;
    return Owner::kLibrary;
  }
  return Owner::kNone;
}

inline void on_alloc() {
  if (t_inside) return;
  // Announce first, then check: stop() turns counting off, then waits until no call is past the
  // check, so its totals are final (the communication thread allocates concurrently).
  g_inflight.fetch_add(1);
  if (!g_on.load()) {
    g_inflight.fetch_sub(1);
    return;
  }
  t_inside = true;
  void* fr[kMaxFrames];
  const int n = backtrace(fr, kMaxFrames);
  int owner = -1;
  const char* lib = nullptr;
  switch (classify(fr, n, owner, lib)) {
    case Owner::kProject: {
      g_project.fetch_add(1, std::memory_order_relaxed);
      const uintptr_t site = call_site(fr[owner]);
      for (int r = 0; r < kMaxRecords; r++) {
        uintptr_t cur = g_rec[r].site.load();
        if (cur == 0 && g_rec[r].site.compare_exchange_strong(cur, site)) {
          g_rec[r].n = n;
          g_rec[r].owner = owner;
          std::memcpy(g_rec[r].frames, fr, sizeof(void*) * static_cast<size_t>(n));
          g_rec[r].filled.store(true);
          g_nrec.fetch_add(1);
          cur = site;
        }
        if (cur == site) {
          g_rec[r].count.fetch_add(1);
          break;
        }
      }
      break;
    }
    case Owner::kLibrary: {
      g_library.fetch_add(1, std::memory_order_relaxed);
      for (int k = 0; k < 8; k++) {
        const char* cur = g_lib_name[k].load();
        if (!cur) {
          const char* expected = nullptr;
          if (g_lib_name[k].compare_exchange_strong(expected, lib) || expected == lib) {
            g_lib_count[k].fetch_add(1);
            break;
          }
          continue;
        }
        if (cur == lib) {
          g_lib_count[k].fetch_add(1);
          break;
        }
      }
      break;
    }
    case Owner::kNone:
      g_unowned.fetch_add(1, std::memory_order_relaxed);
      break;
  }
  t_inside = false;
  g_inflight.fetch_sub(1);
}

inline std::string demangle(const char* m) {
  int st = 0;
  char* d = abi::__cxa_demangle(m, nullptr, nullptr, &st);
  std::string out = st == 0 && d ? d : m;
  std::free(d);
  return out;
}

// Function name of a frame: the executable's symbol table, else dladdr.
inline std::string frame_name(void* f, bool& in_exe, uintptr_t& rel) {
  const uintptr_t a = call_site(f);
  Dl_info info;
  in_exe = false;
  rel = a;
  if (!dladdr(reinterpret_cast<void*>(a), &info) || !info.dli_fname) return "?";
  if (reinterpret_cast<uintptr_t>(info.dli_fbase) == g_exe_base) {
    in_exe = true;
    rel = g_exe_pie ? a - g_exe_base : a;
    const Sym* s = find_sym(rel);
    return s ? demangle(s->name) : "? (executable)";
  }
  std::string lib = info.dli_fname;
  lib = lib.substr(lib.rfind('/') + 1);
  return (info.dli_sname ? demangle(info.dli_sname) : std::string("?")) + " [" + lib + "]";
}

inline std::string addr2line(uintptr_t rel) {
  char cmd[256];
  std::snprintf(cmd, sizeof cmd, "addr2line -C -i -e /proc/%d/exe 0x%lx 2>/dev/null", static_cast<int>(getpid()),
                static_cast<unsigned long>(rel));
  // With -i: the inlined chain, innermost first; library headers (/usr/include) left out.
  std::string out, all;
  if (FILE* p = popen(cmd, "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) {
      std::string l(buf);
      while (!l.empty() && l.back() == '\n') l.pop_back();
      all += (all.empty() ? "" : " < ") + l;
      if (l.rfind("/usr/include/", 0) != 0) out += (out.empty() ? "" : " < ") + l;
    }
    pclose(p);
  }
  if (out.empty()) out = all;
  return out.empty() ? "?" : out;
}

}  // namespace detail

// Reads the executable's symbol table and loads the unwinder; call once before start().
inline void init() {
  using namespace detail;
  if (!g_syms.empty()) return;
  {
    std::ifstream f("/proc/self/exe", std::ios::binary);
    g_symtab_file.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  const char* base = g_symtab_file.data();
  if (g_symtab_file.size() < sizeof(Elf64_Ehdr) || std::memcmp(base, ELFMAG, SELFMAG) != 0) return;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  g_exe_pie = eh->e_type == ET_DYN;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
    const char* names = base + sh[sh[i].sh_link].sh_offset;
    const size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; k++) {
      const int type = ELF64_ST_TYPE(syms[k].st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || syms[k].st_value == 0) continue;
      g_syms.push_back({syms[k].st_value, syms[k].st_value + std::max<uint64_t>(syms[k].st_size, 1),
                        names + syms[k].st_name});
    }
  }
  std::sort(g_syms.begin(), g_syms.end(), [](const Sym& a, const Sym& b) { return a.lo < b.lo; });
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&init), &info)) g_exe_base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  void* f[4];
  backtrace(f, 4);  // loads libgcc's unwinder before counting
}

// True when init() found the symbol table (the attribution needs it).
inline bool ready() { return !detail::g_syms.empty() && detail::g_exe_base != 0; }

inline void start() {
  using namespace detail;
  g_project = 0;
  g_library = 0;
  g_unowned = 0;
  g_nrec = 0;
  for (Record& r : g_rec) {
    r.site = 0;
    r.count = 0;
    r.filled = false;
  }
  for (int k = 0; k < 8; k++) {
    g_lib_name[k] = nullptr;
    g_lib_count[k] = 0;
  }
  g_on = true;
}

inline Counts stop() {
  detail::g_on = false;
  while (detail::g_inflight.load() != 0) {
  }
  return {detail::g_project.load(), detail::g_library.load(), detail::g_unowned.load()};
}

// Owner function of each distinct call site of project allocations (demangled), first seen first.
inline std::vector<std::string> project_owners() {
  using namespace detail;
  std::vector<std::string> out;
  for (const Record& r : g_rec) {
    if (!r.filled.load()) continue;
    bool in_exe;
    uintptr_t rel;
    out.push_back(frame_name(r.frames[r.owner], in_exe, rel));
  }
  return out;
}

// Project allocations whose owner's source location (addr2line, library headers left out)
// contains path_part, e.g. "/src/comm/". Call sites beyond the first kMaxRecords are not counted
// (they count against the caller: project - project_at(...) stays positive).
inline long project_at(const char* path_part) {
  using namespace detail;
  long n = 0;
  for (const Record& rec : g_rec) {
    if (!rec.filled.load()) continue;
    bool in_exe;
    uintptr_t rel;
    frame_name(rec.frames[rec.owner], in_exe, rel);
    if (in_exe && addr2line(rel).find(path_part) != std::string::npos) n += rec.count.load();
  }
  return n;
}

// Libraries' allocations by library, and each distinct call site of project allocations: how many,
// its owner (function, file:line with inlined frames) and the stack outwards from it.
inline std::string report() {
  using namespace detail;
  std::ostringstream os;
  for (int k = 0; k < 8; k++)
    if (const char* l = g_lib_name[k].load()) os << "  library " << l << ": " << g_lib_count[k].load() << "\n";
  long recorded = 0;
  for (const Record& rec : g_rec) {
    if (!rec.filled.load()) continue;
    recorded += rec.count.load();
    bool in_exe;
    uintptr_t rel;
    const std::string owner = frame_name(rec.frames[rec.owner], in_exe, rel);
    os << "  " << rec.count.load() << " x " << owner << "\n      at " << (in_exe ? addr2line(rel) : "?") << "\n";
    for (int i = rec.owner + 1; i < std::min(rec.n, rec.owner + 4); i++)
      os << "      called from " << frame_name(rec.frames[i], in_exe, rel) << "\n";
  }
  if (g_project.load() > recorded)
    os << "  (" << g_project.load() - recorded << " more at call sites beyond the first " << kMaxRecords << ")\n";
  return os.str();
}

}  // namespace ms::alloc_check

extern "C" {
void* malloc(size_t n) noexcept {
  ms::alloc_check::detail::on_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) noexcept {
  ms::alloc_check::detail::on_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) noexcept {
  ms::alloc_check::detail::on_alloc();
  return __libc_realloc(p, n);
}
void* memalign(size_t al, size_t n) noexcept {
  ms::alloc_check::detail::on_alloc();
  return __libc_memalign(al, n);
}
void* aligned_alloc(size_t al, size_t n) noexcept {
  ms::alloc_check::detail::on_alloc();
  return __libc_memalign(al, n);
}
int posix_memalign(void** out, size_t al, size_t n) noexcept {
  ms::alloc_check::detail::on_alloc();
  void* p = __libc_memalign(al, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
}
