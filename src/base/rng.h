// rng: the one source of pseudo-random numbers. splitmix64 (Steele, Lea, Flood 2014) for seeds,
// hashing-like mixing and cheap portable streams; Rng (std::mt19937_64 plus our own Box-Muller) for
// weights and sampling. The same seed gives the same numbers with any standard library. Rng streams
// are keyed by (seed, stream) so independent consumers (tensors, data order, sampling) never share
// a sequence.
#pragma once
#include <cmath>    // std::sqrt, std::log, std::cos
#include <cstdint>  // uint64_t
#include <random>   // std::mt19937_64 (its output sequence is fixed by the standard)

namespace ms {

// Advances state by the golden-ratio increment and returns the next well-mixed 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) : gen_(mix(seed, stream)) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Standard normal via Box-Muller (one value per call; the pair's second value is discarded).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
  }
  uint64_t next_u64() { return gen_(); }

  // splitmix64 of (seed, stream): well-spread seeds for nearby inputs.
  static uint64_t mix(uint64_t seed, uint64_t stream) {
    uint64_t state = seed + 0x9E3779B97F4A7C15ull * stream;
    return splitmix64(state);
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace ms
