// dataloader: path expansion, validated token sources, seeded sample order, prefetching loader.
#include "data/dataloader.h"

#include "data/shard_meta.h"  // shard_verified_by_meta

#include <algorithm>   // std::sort, std::upper_bound, std::copy
#include <filesystem>  // std::filesystem
#include <glob.h>      // glob, globfree
#include <set>         // std::set
#include <utility>     // std::swap

#include "base/check.h"
#include "base/rng.h"  // splitmix64
#include "data/megatron_dataset.h"
#include "data/token_shard.h"

namespace ms {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const char* e) {
  size_t n = std::char_traits<char>::length(e);
  return s.size() >= n && s.compare(s.size() - n, n, e) == 0;
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A .bin whose sibling .idx exists is a Megatron dataset.
bool is_megatron_bin(const std::string& p) {
  return ends_with(p, ".bin") && is_file(p.substr(0, p.size() - 4) + ".idx");
}

class ShardSource final : public TokenSource {
 public:
  // Validated once: by prepare's checksum in meta.json when it lists the shard, else every id.
  ShardSource(const std::string& path, int vocab_size) : shard_(path) {
    if (!shard_verified_by_meta(shard_, vocab_size)) shard_.validate(vocab_size);
  }
  const std::string& path() const override { return shard_.path(); }
  const char* kind() const override { return "llm.c"; }
  uint64_t num_tokens() const override { return shard_.num_tokens(); }
  void read(uint64_t offset, size_t count, int* out) const override { shard_.read(offset, count, out); }

 private:
  TokenShard shard_;
};

class MegatronSource final : public TokenSource {
 public:
  MegatronSource(const std::string& path, int vocab_size) : ds_(path), bin_(ds_.bin_path()) {
    ds_.validate(vocab_size);
  }
  const std::string& path() const override { return bin_; }
  const char* kind() const override { return "megatron"; }
  uint64_t num_tokens() const override { return ds_.num_tokens(); }
  void read(uint64_t offset, size_t count, int* out) const override {
    ds_.read_tokens(offset, count, out);
  }

 private:
  MegatronDataset ds_;
  std::string bin_;
};

// Uniform integer in [0, range) without bias (Lemire 2019).
uint64_t uniform_below(uint64_t& state, uint64_t range) {
  unsigned __int128 m = static_cast<unsigned __int128>(splitmix64(state)) * range;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < range) {
    uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(splitmix64(state)) * range;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// perm_{seed,epoch}: Fisher–Yates over 0..n-1 driven by a stream seeded from (seed, epoch).
void make_permutation(uint64_t seed, uint64_t epoch, uint64_t n, std::vector<uint64_t>& perm) {
  perm.resize(n);
  for (uint64_t i = 0; i < n; ++i) perm[i] = i;
  uint64_t s = seed;
  uint64_t state = splitmix64(s) ^ (epoch * 0xD1B54A32D192ED03ull + 0x8BB84B93962EACC9ull);
  for (uint64_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[uniform_below(state, i)]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Paths

std::vector<std::string> expand_data_paths(const std::vector<std::string>& paths,
                                           const std::string& what) {
  MS_CHECK(!paths.empty(), "{}: no data paths given", what);
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    MS_CHECK(!p.empty(), "{}: empty data path", what);
    std::vector<std::string> matches;
    std::error_code ec;
    if (p.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      int rc = ::glob(p.c_str(), 0, nullptr, &g);
      if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (is_file(g.gl_pathv[i])) matches.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      MS_CHECK(rc == 0 || rc == GLOB_NOMATCH, "{}: cannot expand '{}' (glob error {})", what, p, rc);
    } else if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p, ec)) {
        std::string f = e.path().string();
        if (ends_with(f, ".bin") && is_file(f)) matches.push_back(f);
      }
      MS_CHECK(!ec, "{}: cannot list directory '{}': {}", what, p, ec.message());
    } else if (is_file(p)) {
      matches.push_back(p);
    } else if (is_file(p + ".bin") && is_file(p + ".idx")) {
      matches.push_back(p + ".bin");  // a Megatron prefix
    }
    MS_CHECK(!matches.empty(), "{}: no files match '{}'", what, p);
    std::sort(matches.begin(), matches.end());  // byte order, independent of locale
    std::set<std::string> seen;
    for (std::string m : matches) {
      if (ends_with(m, ".idx")) {
        std::string bin = m.substr(0, m.size() - 4) + ".bin";
        MS_CHECK(is_file(bin), "{}: '{}' is a Megatron index without its data file {}", what, m, bin);
        m = bin;
      }
      if (seen.insert(m).second) out.push_back(m);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// TokenDataset

TokenDataset::TokenDataset(const std::vector<std::string>& paths, int vocab_size,
                           const std::string& what) {
  MS_CHECK(vocab_size > 0, "{}: vocab size {} must be positive", what, vocab_size);
  for (const std::string& f : expand_data_paths(paths, what)) {
    if (is_megatron_bin(f)) sources_.push_back(std::make_unique<MegatronSource>(f, vocab_size));
    else sources_.push_back(std::make_unique<ShardSource>(f, vocab_size));
  }
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&& o) noexcept
    : sources_(std::move(o.sources_)), samples_read_(o.samples_read_.load(std::memory_order_relaxed)) {}

uint64_t TokenDataset::num_tokens() const {
  uint64_t n = 0;
  for (const auto& s : sources_) n += s->num_tokens();
  return n;
}

uint64_t TokenDataset::num_samples(int T) const {
  MS_CHECK(T > 0, "sequence length T = {} must be positive", T);
  uint64_t n = 0;
  for (const auto& s : sources_) n += s->num_tokens() > 0 ? (s->num_tokens() - 1) / T : 0;
  return n;
}

void TokenDataset::read_sample(uint64_t id, int T, int* inputs, int* targets) const {
  samples_read_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& s : sources_) {
    uint64_t n = s->num_tokens() > 0 ? (s->num_tokens() - 1) / T : 0;
    if (id < n) {
      // T+1 tokens: inputs = [0, T), targets = [1, T+1). Read T into inputs, then shift.
      s->read(id * T, T, inputs);
      std::copy(inputs + 1, inputs + T, targets);
      s->read(id * T + T, 1, targets + T - 1);
      return;
    }
    id -= n;
  }
  MS_FAIL("sample {} out of range ({} samples of length {})", id, num_samples(T), T);
}

// ---------------------------------------------------------------------------------------------
// DataLoader

DataLoader::DataLoader(std::vector<std::string> paths, int B, int T, int vocab_size, uint64_t seed,
                       bool shuffle, std::string name, bool prefetch)
    : dataset_(paths, vocab_size, name), B_(B), T_(T), seed_(seed), shuffle_(shuffle),
      name_(std::move(name)), prefetch_(prefetch) {
  MS_CHECK(B > 0 && T > 0, "{}: batch size B = {} and sequence length T = {} must be positive", name_,
           B, T);
  num_samples_ = dataset_.num_samples(T);
  MS_CHECK(num_samples_ > 0,
           "{}: no sample of T+1 = {} tokens fits in any source ({} sources, {} tokens in total)",
           name_, T + 1, dataset_.num_sources(), dataset_.num_tokens());
  if (prefetch_) worker_ = std::thread([this] { worker_loop(); });
}

DataLoader::~DataLoader() { stop_worker(); }

void DataLoader::stop_worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

const std::vector<uint64_t>& DataLoader::perm_for(uint64_t epoch) {
  if (epoch != perm_epoch_) {
    make_permutation(seed_, epoch, num_samples_, perm_);
    perm_epoch_ = epoch;
  }
  return perm_;
}

uint64_t DataLoader::sample_at(uint64_t epoch, uint64_t index) const {
  MS_CHECK(index < num_samples_, "{}: sample index {} >= {} samples per epoch", name_, index,
           num_samples_);
  if (!shuffle_) return index;
  std::vector<uint64_t> perm;
  make_permutation(seed_, epoch, num_samples_, perm);
  return perm[index];
}

void DataLoader::advance(Position& p, uint64_t n) const {
  p.index += n;
  p.epoch += p.index / num_samples_;
  p.index %= num_samples_;
}

void DataLoader::set_dp_slice(int dp_rank, int dp) {
  MS_CHECK(dp >= 1 && dp_rank >= 0 && dp_rank < dp, "{}: data-parallel slice {} of {} is impossible", name_, dp_rank,
           dp);
  {
    std::lock_guard<std::mutex> lock(mu_);
    dp_rank_ = dp_rank;
    dp_ = dp;
  }
  set_position(position());
}

void DataLoader::fill(Batch& b, Position pos) {
  b.inputs.resize(static_cast<size_t>(B_) * T_);
  b.targets.resize(static_cast<size_t>(B_) * T_);
  b.start = pos;
  advance(pos, static_cast<uint64_t>(dp_rank_) * B_);
  for (int r = 0; r < B_; ++r) {
    uint64_t id = shuffle_ ? perm_for(pos.epoch)[pos.index] : pos.index;
    dataset_.read_sample(id, T_, b.inputs.data() + static_cast<size_t>(r) * T_,
                         b.targets.data() + static_cast<size_t>(r) * T_);
    if (++pos.index == num_samples_) {
      pos.index = 0;
      ++pos.epoch;
    }
  }
  advance(pos, static_cast<uint64_t>(dp_ - 1 - dp_rank_) * B_);
  b.end = pos;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !slot_full_; });
    if (stop_) return;
    const uint64_t gen = generation_;
    const Position start = producer_pos_;
    lock.unlock();
    std::exception_ptr err;
    try {
      fill(scratch_, start);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (gen != generation_) continue;  // set_position() moved on; discard
    if (err) {
      error_ = err;
    } else {
      std::swap(slot_, scratch_);
      producer_pos_ = slot_.end;
    }
    slot_full_ = true;
    cv_.notify_all();
  }
}

void DataLoader::next_batch(int* inputs, int* targets) {
  const size_t n = static_cast<size_t>(B_) * T_;
  if (!prefetch_) {
    fill(slot_, consumer_pos_);
    std::copy(slot_.inputs.begin(), slot_.inputs.begin() + n, inputs);
    std::copy(slot_.targets.begin(), slot_.targets.begin() + n, targets);
    consumer_pos_ = slot_.end;
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return slot_full_; });
  if (error_) std::rethrow_exception(error_);
  std::copy(slot_.inputs.begin(), slot_.inputs.begin() + n, inputs);
  std::copy(slot_.targets.begin(), slot_.targets.begin() + n, targets);
  consumer_pos_ = slot_.end;
  slot_full_ = false;
  lock.unlock();
  cv_.notify_all();
}

DataLoader::Position DataLoader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumer_pos_;
}

void DataLoader::set_position(Position p) {
  MS_CHECK(p.index < num_samples_, "{}: cannot resume at sample {} of epoch {}: an epoch has {} samples",
           name_, p.index, p.epoch, num_samples_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    consumer_pos_ = p;
    producer_pos_ = p;
    slot_full_ = false;
    error_ = nullptr;
  }
  cv_.notify_all();
}

}  // namespace ms
