// logits_tool MODEL --tokens 1,2,3 [--top K] [--full] [--ids a,b,..] [-ctk T] [-ctv T]
//             [-ub N] [-b N] [-t N] [-c N] [--kvu]
// Decodes the tokens as one sequence (all rows output) and prints JSON, one entry per position:
//   {"top_ids": [...], "top_logprobs": [...], "logsumexp": x, "logprobs": [logprob of --ids],
//    "logits": [...] (with --full)}
// Used by tests/python/test_engine.py against llama.cpp fixtures and the numpy reference.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/model.h"

namespace {

std::vector<int32_t> parse_ids(const char* s) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: logits_tool MODEL --tokens a,b,c [options]\n");
    return 2;
  }
  std::vector<int32_t> tokens, ids;
  int top = 20;
  bool full = false;
  mnemo::ContextParams cp;
  cp.n_ctx = 2048;
  cp.n_threads = 2;
  for (int i = 2; i < argc; ++i) {
    auto arg = [&](const char* name) { return std::strcmp(argv[i], name) == 0 && i + 1 < argc; };
    if (arg("--tokens"))
      tokens = parse_ids(argv[++i]);
    else if (arg("--ids"))
      ids = parse_ids(argv[++i]);
    else if (arg("--top"))
      top = std::atoi(argv[++i]);
    else if (arg("-ub"))
      cp.n_ubatch = uint32_t(std::atoi(argv[++i]));
    else if (arg("-b"))
      cp.n_batch = uint32_t(std::atoi(argv[++i]));
    else if (arg("-t"))
      cp.n_threads = std::atoi(argv[++i]);
    else if (arg("-c"))
      cp.n_ctx = uint32_t(std::atoi(argv[++i]));
    else if (arg("-ctk"))
      cp.type_k = *mnemo::type_from_name(argv[++i]);
    else if (arg("-ctv"))
      cp.type_v = *mnemo::type_from_name(argv[++i]);
    else if (std::strcmp(argv[i], "--full") == 0)
      full = true;
    else if (std::strcmp(argv[i], "--kvu") == 0)
      cp.kv_unified = true;
    else if (std::strcmp(argv[i], "--swa-full") == 0)
      cp.swa_full = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (cp.n_ubatch > cp.n_batch) cp.n_batch = cp.n_ubatch;
  auto model = mnemo::Model::load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  auto ctx = mnemo::Context::create(**model, cp);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", ctx.status().to_string().c_str());
    return 1;
  }
  nlohmann::json out = nlohmann::json::array();
  const int n_vocab = int((*model)->hparams().n_vocab);
  for (size_t i0 = 0; i0 < tokens.size(); i0 += cp.n_batch) {
    mnemo::Batch batch;
    const size_t end = std::min(tokens.size(), i0 + cp.n_batch);
    for (size_t i = i0; i < end; ++i) batch.add(tokens[i], mnemo::Pos(i), {0}, true);
    mnemo::Status st = (*ctx)->decode(batch);
    if (!st.ok()) {
      std::fprintf(stderr, "decode: %s\n", st.to_string().c_str());
      return 1;
    }
    for (uint32_t k = 0; k < (*ctx)->n_outputs(); ++k) {
      auto lg = (*ctx)->logits(k);
      double mx = -INFINITY;
      for (float v : lg) mx = std::max<double>(mx, v);
      double sum = 0;
      for (float v : lg) sum += std::exp(double(v) - mx);
      const double lse = mx + std::log(sum);
      std::vector<int32_t> order(n_vocab);
      std::iota(order.begin(), order.end(), 0);
      const int k_top = std::min(top, n_vocab);
      std::partial_sort(
          order.begin(), order.begin() + k_top, order.end(),
          [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
      nlohmann::json row;
      std::vector<int32_t> top_ids(order.begin(), order.begin() + k_top);
      std::vector<double> top_lp;
      for (int32_t id : top_ids) top_lp.push_back(double(lg[id]) - lse);
      std::vector<double> lp;
      for (int32_t id : ids) lp.push_back(id >= 0 && id < n_vocab ? double(lg[id]) - lse : NAN);
      row["top_ids"] = top_ids;
      row["top_logprobs"] = top_lp;
      row["logsumexp"] = lse;
      row["logprobs"] = lp;
      if (full) row["logits"] = std::vector<float>(lg.begin(), lg.end());
      out.push_back(row);
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
