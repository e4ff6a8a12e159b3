#!/usr/bin/env bash
# Reproduces defaultmodel/files — dflash's own default target and its DFlash draft — from the
# shared TinyStories corpus with dflash's own commands, then copies the result into place.
#
#   bash defaultmodel/reproduce.sh [WORK_DIR]
#
# Every step is deterministic (fixed seeds, a fixed split of work over two goroutines), so the
# files come out identical on a machine whose kernel path (DFLASH_KERNEL, avx512 here) matches;
# another path sums in another order and gives slightly different weights.
#
# Wall times on the development machine (2 cores shared with other jobs):
#   tokenizer  0.3 s     4096 tokens, byte-level BPE, lower-cased text
#   target     12.5 min  Qwen3 architecture: 6 layers, hidden 192, 4/2 heads of 48, MLP 528,
#                        3.28M parameters, 2 epochs over the 4 MB corpus (1.0M tokens), seed 0
#   draft      23.4 min  DFlash: 2 layers, block 16, mask <|mask|> (id 3), 3000 steps at lr 8e-3 on
#                        the target's greedy continuations (160 tokens) of 1500 corpus prompts, seed 1
#   convert    < 1 s     both folders to bf16 (dflash convert)
set -euo pipefail
cd "$(dirname "$0")/.."
data="${DFLASH_SHARED_DATA:-../shared/data}"
corpus="$data/corpora/tinystories_4MB.txt"
heldout="$data/corpora/tinystories_val_800K.txt"
work="${1:-/tmp/dflash-default}"
mkdir -p "$work"
go build -o "$work/dflash" ./cmd/dflash
d="$work/dflash"

"$d" train tokenizer --data "$corpus" --out "$work/tok" --lowercase --vocab 4096
"$d" train target --tokenizer "$work/tok" --data "$corpus" --out "$work/target" --seed 0 \
  --eval "$heldout"
"$d" train draft --target "$work/target" --data "$corpus" --out "$work/draft" \
  --n 1500 --len 160 --layers 2 --block 16 --mask 3 --steps 3000 --lr 8e-3 --seed 1 \
  --eval "$heldout" --eval-n 40

# Both are trained in f32 and shipped in bf16: half the bytes (8.4 MB for the pair), and decoding
# reads half as much per token. Rounding to bf16 is exact and deterministic (nearest even).
rm -rf "$work/target-bf16" "$work/draft-bf16"
"$d" convert --model "$work/target" --out "$work/target-bf16"
"$d" convert --model "$work/draft" --out "$work/draft-bf16"

rm -rf defaultmodel/files
mkdir -p defaultmodel/files/target defaultmodel/files/draft
cp "$work/target-bf16"/{config.json,generation_config.json,model.safetensors,tokenizer.json,tokenizer_config.json} defaultmodel/files/target/
cp "$work/draft-bf16"/{config.json,model.safetensors} defaultmodel/files/draft/
echo "defaultmodel/files updated from $work"
