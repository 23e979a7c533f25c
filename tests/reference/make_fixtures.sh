#!/usr/bin/env bash
# Regenerates mnemo's llama.cpp reference fixtures in tests/fixtures/ with the peer (Debian sid's
# prebuilt llama.cpp, see scripts/peer-setup), from the inputs in tests/reference/cases.json:
#   tokenize_<model>.json   token ids, pieces and detokenized text of tricky strings, 4 flag sets
#   logits_<model>.json     top-20 log-probabilities at every position of 3 prompts
#   generate_<model>.json   32-token greedy continuations of 2 prompts
# for <model> = smollm2 (models/SmolLM2-135M-Instruct-Q4_1.gguf), gemma3 (models/gemma-3-270m-Q4_K_M.gguf).
#   tests/reference/make_fixtures.sh                 # all fixtures
#   tests/reference/make_fixtures.sh --bench-sample  # also docs/peer-llama-bench-sample.json
# llama_ref.c is compiled inside the chroot against sid's libllama (build-peer/llama_ref).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd -P)"
cd "$ROOT"
PEER=(env PEER_QUIET=1 "$ROOT/scripts/peer")
FIXTURES=tests/fixtures
TMP=build-peer/fixtures-tmp
BENCH_SAMPLE=0
for arg in "$@"; do
  case "$arg" in
    --bench-sample) BENCH_SAMPLE=1 ;;
    *) echo "make_fixtures: unknown argument $arg" >&2; exit 2 ;;
  esac
done

say() { echo "make_fixtures: $*"; }

CPU_BACKENDS=/usr/lib/x86_64-linux-gnu/ggml/backends0
declare -A MODELS=(
  [smollm2]=models/SmolLM2-135M-Instruct-Q4_1.gguf
  [gemma3]=models/gemma-3-270m-Q4_K_M.gguf
)

say "peer setup (does nothing when already done)"
scripts/peer-setup
for tag in "${!MODELS[@]}"; do
  if [ ! -f "${MODELS[$tag]}" ]; then
    say "fetching missing model ${MODELS[$tag]}"
    scripts/fetch-model "$tag"
  fi
done

say "compiling tests/reference/llama_ref.c in the chroot -> build-peer/llama_ref"
"${PEER[@]}" gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o build-peer/llama_ref tests/reference/llama_ref.c \
  -lllama -lggml -lggml-base -lm

pkg_version="$("${PEER[@]}" dpkg-query -W -f='${Version}' llama.cpp-tools)"
ggml_version="$("${PEER[@]}" dpkg-query -W -f='${Version}' libggml0)"
build_line="$("${PEER[@]}" llama-completion --version 2>&1 | sed -n 's/^version: //p' | head -n 1)"
[ -n "$build_line" ] || { echo "make_fixtures: cannot read llama-completion --version" >&2; exit 1; }
say "llama.cpp-tools $pkg_version, libggml0 $ggml_version, build: $build_line"

mkdir -p "$TMP" "$FIXTURES"
for section in tokenize logits generate; do
  "${PEER[@]}" python3 tests/reference/fixtures_tool.py tsv "$section" tests/reference/cases.json "$TMP/$section.tsv"
done

for tag in smollm2 gemma3; do
  model="${MODELS[$tag]}"
  sha="$(sha256sum "$model" | cut -d' ' -f1)"
  meta=(
    "llama_cpp_package=llama.cpp-tools $pkg_version (Debian sid)"
    "llama_cpp_build=$build_line"
    "libggml_package=libggml0 $ggml_version"
    "model_path=$model"
    "model_sha256=$sha"
  )
  for section in tokenize logits generate; do
    out="$FIXTURES/${section}_${tag}.json"
    say "$tag: llama_ref $section -> $out"
    "${PEER[@]}" build-peer/llama_ref "$section" "$model" "$TMP/$section.tsv" "$out" "${meta[@]}"
  done
  # The same logits from other llama.cpp configurations, stored beside the fixture's own as a
  # measure of llama.cpp's disagreement with itself (see fixtures_tool.py variants).
  say "$tag: logits variants: repacked weights, AVX2 (haswell) build, f32 weights"
  "${PEER[@]}" env LLAMA_REF_EXTRA_BUFTS=1 build-peer/llama_ref logits "$model" "$TMP/logits.tsv" "$TMP/logits_${tag}_repack.json"
  "${PEER[@]}" env LLAMA_REF_CPU_BACKEND="$CPU_BACKENDS/libggml-cpu-haswell.so" \
    build-peer/llama_ref logits "$model" "$TMP/logits.tsv" "$TMP/logits_${tag}_haswell.json"
  "${PEER[@]}" llama-quantize --allow-requantize "$model" "$TMP/${tag}_f32.gguf" F32 2 >"$TMP/quantize_$tag.log" 2>&1 ||
    { tail -n 20 "$TMP/quantize_$tag.log" >&2; exit 1; }
  "${PEER[@]}" build-peer/llama_ref logits "$TMP/${tag}_f32.gguf" "$TMP/logits.tsv" "$TMP/logits_${tag}_f32.json"
  rm -f "$TMP/${tag}_f32.gguf"
  "${PEER[@]}" python3 tests/reference/fixtures_tool.py variants "$FIXTURES/logits_$tag.json" \
    "repacked_weights=$TMP/logits_${tag}_repack.json:llama.cpp default use_extra_bufts=true (weights repacked for this machine: AMX on Intel AMX CPUs, CPU_REPACK elsewhere)" \
    "cpu_haswell_build=$TMP/logits_${tag}_haswell.json:the AVX2 (haswell) CPU backend build instead of the best one for this CPU" \
    "f32_weights=$TMP/logits_${tag}_f32.json:weights dequantized to f32 by llama-quantize --allow-requantize F32 (no activation quantization in matmuls)"
  say "$tag: cross-checking the C API tokenization against the llama-tokenize tool"
  "${PEER[@]}" python3 tests/reference/fixtures_tool.py crosscheck "$model" "$FIXTURES/tokenize_$tag.json"
  "${PEER[@]}" python3 tests/reference/fixtures_tool.py check "$FIXTURES/logits_$tag.json" 32 128
  "${PEER[@]}" python3 tests/reference/fixtures_tool.py check "$FIXTURES/generate_$tag.json" 1 1000
done

if [ "$BENCH_SAMPLE" = 1 ]; then
  out=docs/peer-llama-bench-sample.json
  say "llama-bench -t 2 -p 512 -n 128 -o json on both models -> $out"
  "${PEER[@]}" llama-bench -m "${MODELS[smollm2]}" -m "${MODELS[gemma3]}" -t 2 -p 512 -n 128 -o json >"$TMP/bench.json"
  "${PEER[@]}" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d, list) and len(d) == 4, d' "$TMP/bench.json"
  cp "$TMP/bench.json" "$out"
fi

du -ch "$FIXTURES"/tokenize_*.json "$FIXTURES"/logits_*.json "$FIXTURES"/generate_*.json | tail -n 1 | sed 's/^/make_fixtures: fixtures total /'
say "done"
