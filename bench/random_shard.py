#!/usr/bin/python3
# random_shard.py PATH N VOCAB: an llm.c token shard of N random token ids below VOCAB (seed 5) for
# the benchmarks (step times do not depend on the tokens): a 1024-byte header of 256 little-endian
# int32 [20240520, 1, N, 0...], then N uint16 tokens.
import random, struct, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(5)
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(rng.randrange(vocab) for _ in range(n))))
