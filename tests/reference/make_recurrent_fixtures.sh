#!/usr/bin/env bash
# Regenerates the llama.cpp reference logits of mnemo's tiny recurrent and mixture-of-experts
# models:
#   tests/fixtures/logits_tiny_<name>.json   top-20 log-probabilities at every position of one
#                                            prompt, from llama.cpp (the peer) on the very GGUF
#                                            file our writer makes
# for <name> = mamba2_f32, granitehybrid_f32, granitehybrid (quantized weights), qwen3moe_f32,
# qwen3moe (quantized), qwen35_f32, qwen35, qwen35moe_f32, qwen35moe, and qwen35*_long: the
# same qwen35 / qwen35moe files on four longer prompts (64, 65, 100 and 130 tokens: llama.cpp
# computes a prompt's Gated DeltaNet in chunks of 64 tokens, so these cross one and two chunk
# boundaries). That llama.cpp loads these files at all checks our tensor names, shapes
# and metadata keys; that its logits agree checks the forward pass
# (tests/python/test_recurrent.py, tests/python/test_moe.py). The models are regenerated
# by the test with the same arguments; model_sha256 in each fixture proves they are the same.
#   tests/reference/make_recurrent_fixtures.sh [BUILD_DIR [NAME...]]
# (default build and every name; needs the peer). PEER_WORK (default build-peer) is where
# llama_ref and the temporary models go; the chroot sees only this checkout, so in a git worktree
# whose build-peer is a link to another checkout's, set PEER_WORK to a real folder inside this
# one (e.g. PEER_WORK=build/peer-work).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd -P)"
cd "$ROOT"
BUILD="${1:-build}"
shift || true
ONLY=("$@")
PEER=(env PEER_QUIET=1 "$ROOT/scripts/peer")
WORK="${PEER_WORK:-build-peer}"
TMP="$WORK/recurrent-tmp"
mkdir -p "$TMP"
scripts/peer-setup
[ -x "$WORK/llama_ref" ] ||
  "${PEER[@]}" gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o "$WORK/llama_ref" \
    tests/reference/llama_ref.c -lllama -lggml -lggml-base -lm

# The prompt (text, tokenized by llama.cpp with the models' small SentencePiece vocabulary).
printf 'prose\ttext\t%s\n' "$(printf 'Hello world, this is a test of 42 tokens!' | xxd -p | tr -d '\n')" \
  >"$TMP/cases.tsv"
# The long prompts: prefixes of one text, cut where the models' vocabulary (about a character
# per token) gives 64, 65, 100 and 130 tokens, BOS included (checked below).
LONG_TEXT='Hello world, this is a test of 42 tokens! The quick brown fox jumps over the lazy dog while seven wizards quietly brew a potion of 3.14 parts moonlight and 2 parts rain.'
: >"$TMP/long.tsv"
for cut in 79:64 77:65 119:100 156:130; do
  printf 'long%s\ttext\t%s\n' "${cut#*:}" "$(printf '%s' "${LONG_TEXT:0:${cut%:*}}" | xxd -p | tr -d '\n')" \
    >>"$TMP/long.tsv"
done
pkg_version="$("${PEER[@]}" dpkg-query -W -f='${Version}' llama.cpp-tools)"
declare -A ARGS=(
  [mamba2_f32]="mamba2 --seed 3 --f32"
  [granitehybrid_f32]="granitehybrid --seed 3 --f32"
  [granitehybrid]="granitehybrid --seed 3"
  [qwen3moe_f32]="qwen3moe --seed 3 --f32"
  [qwen3moe]="qwen3moe --seed 3"
  [qwen35_f32]="qwen35 --seed 3 --f32"
  [qwen35]="qwen35 --seed 3"
  [qwen35moe_f32]="qwen35moe --seed 3 --f32"
  [qwen35moe]="qwen35moe --seed 3"
  [qwen35_long_f32]="qwen35 --seed 3 --f32"
  [qwen35_long]="qwen35 --seed 3"
  [qwen35moe_long_f32]="qwen35moe --seed 3 --f32"
  [qwen35moe_long]="qwen35moe --seed 3"
)
for name in "${!ARGS[@]}"; do
  if [ "${#ONLY[@]}" -gt 0 ] && [[ ! " ${ONLY[*]} " =~ " $name " ]]; then continue; fi
  read -r arch rest <<<"${ARGS[$name]}"
  model="$TMP/$name.gguf"
  # shellcheck disable=SC2086
  "$BUILD/tests/tools/make_tiny_model" "$arch" "$model" $rest
  out="tests/fixtures/logits_tiny_$name.json"
  echo "make_recurrent_fixtures: $name -> $out"
  cases="$TMP/cases.tsv"
  [[ "$name" != *_long* ]] || cases="$TMP/long.tsv"
  "${PEER[@]}" "$WORK/llama_ref" logits "$model" "$cases" "$out" \
    "llama_cpp_package=llama.cpp-tools $pkg_version (Debian sid)" \
    "make_tiny_model_args=${ARGS[$name]}" \
    "model_sha256=$(sha256sum "$model" | cut -d' ' -f1)"
  if [[ "$name" == *_long* ]]; then
    python3 -c 'import json, sys
n = [p["n_tokens"] for p in json.load(open(sys.argv[1]))["prompts"]]
assert n == [64, 65, 100, 130], f"long prompts tokenized to {n}: adjust the cuts"' "$out"
  fi
done
