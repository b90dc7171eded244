// data_stream: what orders this run's training stream, recorded in every manifest and compared on
// resume (a resume continues at the saved sample index, which means the same sample only in the
// same stream): a fingerprint of the data.train files (each file's name and size, and its XXH64
// where meta.json beside it lists one; never the whole bytes), train.seed, train.seq_len, the
// sequences per optimizer step over all ranks and data.shuffle. cfg must be resolved
// (Config::resolve_layout: dp and grad_accum final).
#pragma once
#include "ckpt/manifest.h"  // ManifestDataStream
#include "config/config.h"  // Config

namespace ms {

// Throws naming data.train when its files cannot be listed.
ManifestDataStream data_stream_of(const Config& cfg);

}  // namespace ms
