#!/usr/bin/env bash
# Regenerates the llama.cpp reference logits of mnemo's tiny recurrent and mixture-of-experts
# models:
#   tests/fixtures/logits_tiny_<name>.json   top-20 log-probabilities at every position of one
#                                            prompt, from llama.cpp (the peer) on the very GGUF
#                                            file our writer makes
# for <name> = mamba2_f32, granitehybrid_f32, granitehybrid (quantized weights), qwen3moe_f32,
# qwen3moe (quantized), qwen35_f32, qwen35, qwen35moe_f32, qwen35moe. That llama.cpp loads these files at all checks our tensor names, shapes
# and metadata keys; that its logits agree checks the forward pass
# (tests/python/test_recurrent.py, tests/python/test_moe.py). The models are regenerated
# by the test with the same arguments; model_sha256 in each fixture proves they are the same.
#   tests/reference/make_recurrent_fixtures.sh [BUILD_DIR [NAME...]]
# (default build and every name; needs the peer)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd -P)"
cd "$ROOT"
BUILD="${1:-build}"
shift || true
ONLY=("$@")
PEER=(env PEER_QUIET=1 "$ROOT/scripts/peer")
TMP=build-peer/recurrent-tmp
mkdir -p "$TMP"
scripts/peer-setup
[ -x build-peer/llama_ref ] ||
  "${PEER[@]}" gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o build-peer/llama_ref \
    tests/reference/llama_ref.c -lllama -lggml -lggml-base -lm

# The prompt (text, tokenized by llama.cpp with the models' small SentencePiece vocabulary).
printf 'prose\ttext\t%s\n' "$(printf 'Hello world, this is a test of 42 tokens!' | xxd -p | tr -d '\n')" \
  >"$TMP/cases.tsv"
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
)
for name in "${!ARGS[@]}"; do
  if [ "${#ONLY[@]}" -gt 0 ] && [[ ! " ${ONLY[*]} " =~ " $name " ]]; then continue; fi
  read -r arch rest <<<"${ARGS[$name]}"
  model="$TMP/$name.gguf"
  # shellcheck disable=SC2086
  "$BUILD/tests/tools/make_tiny_model" "$arch" "$model" $rest
  out="tests/fixtures/logits_tiny_$name.json"
  echo "make_recurrent_fixtures: $name -> $out"
  "${PEER[@]}" build-peer/llama_ref logits "$model" "$TMP/cases.tsv" "$out" \
    "llama_cpp_package=llama.cpp-tools $pkg_version (Debian sid)" \
    "make_tiny_model_args=${ARGS[$name]}" \
    "model_sha256=$(sha256sum "$model" | cut -d' ' -f1)"
done
