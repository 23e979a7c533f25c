// tokenize_tool: drives mnemo's tokenizer and chat templates from tests/python/test_tokenizer.py
// and tests/python/test_chat_template.py.
//
//   tokenize_tool MODEL [--add-special 0|1] [--parse-special 0|1] < TEXT
//       Tokenizes stdin (raw bytes; defaults 1 and 1). Prints one JSON object:
//         {"ids": [...], "pieces_hex": [...], "detok_hex": "...", "detok_plain_hex": "...",
//          "roundtrip_hex": "..."}
//       pieces: token_to_piece(id, special=true); detok: detokenize(special=true,
//       remove_special=false); detok_plain: detokenize(special=false, remove_special=true);
//       both with llama.cpp's clean_spaces rule, as llama_detokenize applies it. roundtrip:
//       detokenize(special=true) without space clean-up. All as hex (pieces may split a UTF-8
//       character).
//   tokenize_tool MODEL --batch < JSON
//       JSON input: [{"text_hex": "...", "add_special": bool, "parse_special": bool}, ...];
//       prints a JSON array of the objects above, one per input, loading the model once.
//   tokenize_tool MODEL --info
//       {"n_vocab", "type", "pre", "bos", "eos", "eot", "unk", "pad", "nl", "add_bos",
//        "add_eos", "add_space_prefix", "clean_spaces", "eog": [...], "chat_template"}
//   tokenize_tool --chat (MODEL | --template FILE | --name NAME) [--add-generation-prompt 0|1]
//       < JSON messages [{"role", "content"}, ...]. Prints
//       {"family": "...", "recognized": bool, "default_system": "...", "text": "..."}.
// Errors (bad arguments, a model the loader rejects): a message on stderr, exit code 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "mnemo/chat.h"
#include "mnemo/gguf.h"
#include "mnemo/tokenizer.h"

namespace {

using json = nlohmann::ordered_json;

std::string to_hex(const std::string& s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool from_hex(const std::string& h, std::string* out) {
  if (h.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < h.size(); i += 2) {
    char* end = nullptr;
    const std::string byte = h.substr(i, 2);
    const long v = std::strtol(byte.c_str(), &end, 16);
    if (end != byte.c_str() + 2) return false;
    out->push_back(static_cast<char>(v));
  }
  return true;
}

std::string read_stdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "tokenize_tool: %s\n", msg.c_str());
  return 1;
}

json tokenize_json(const mnemo::Tokenizer& tok, const std::string& text, bool add_special,
                   bool parse_special) {
  const std::vector<mnemo::TokenId> ids = tok.tokenize(text, add_special, parse_special);
  json pieces = json::array();
  for (mnemo::TokenId id : ids) pieces.push_back(to_hex(tok.token_to_piece(id, true)));
  mnemo::DetokenizeOptions full;
  full.special = true;
  full.clean_spaces = true;
  mnemo::DetokenizeOptions plain;
  plain.remove_special = true;
  plain.clean_spaces = true;
  json r;
  r["ids"] = ids;
  r["pieces_hex"] = pieces;
  r["detok_hex"] = to_hex(tok.detokenize(ids, full));
  r["detok_plain_hex"] = to_hex(tok.detokenize(ids, plain));
  r["roundtrip_hex"] = to_hex(tok.detokenize(ids, true));
  return r;
}

mnemo::Result<mnemo::Tokenizer> load(const std::string& path) {
  MNEMO_ASSIGN_OR_RETURN(mnemo::gguf::File f, mnemo::gguf::File::open(path));
  return mnemo::Tokenizer::from_gguf(f);
}

int chat_main(const std::vector<std::string>& args) {
  std::string model, tmpl_file, name;
  bool add_gen = true;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--template" && i + 1 < args.size()) {
      tmpl_file = args[++i];
    } else if (a == "--name" && i + 1 < args.size()) {
      name = args[++i];
    } else if (a == "--add-generation-prompt" && i + 1 < args.size()) {
      add_gen = args[++i] != "0";
    } else if (a == "--chat") {
    } else if (!a.empty() && a[0] != '-') {
      model = a;
    } else {
      return fail("unknown argument " + a);
    }
  }
  mnemo::ChatTemplate tmpl;
  if (!name.empty()) {
    auto r = mnemo::ChatTemplate::from_name(name);
    if (!r.ok()) return fail(r.status().to_string());
    tmpl = r.value();
  } else if (!tmpl_file.empty()) {
    std::ifstream in(tmpl_file, std::ios::binary);
    if (!in) return fail("cannot read " + tmpl_file);
    tmpl = mnemo::ChatTemplate::detect(
        std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  } else if (!model.empty()) {
    auto tok = load(model);
    if (!tok.ok()) return fail(tok.status().to_string());
    tmpl = mnemo::ChatTemplate::detect(tok->chat_template());
  } else {
    return fail("--chat needs MODEL, --template FILE or --name NAME");
  }
  std::vector<mnemo::ChatMessage> msgs;
  try {
    for (const auto& m : json::parse(read_stdin())) {
      msgs.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
  } catch (const std::exception& e) {
    return fail(std::string("bad messages JSON: ") + e.what());
  }
  json out;
  out["family"] = std::string(mnemo::chat_template_family_name(tmpl.family()));
  out["recognized"] = tmpl.recognized();
  out["default_system"] = tmpl.default_system();
  out["text"] = tmpl.apply(msgs, add_gen);
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--chat") return chat_main(args);
  }
  if (args.empty() || args[0].empty() || args[0][0] == '-') {
    return fail(
        "usage: tokenize_tool MODEL [--add-special 0|1] [--parse-special 0|1] "
        "[--batch | --info] < input   |   tokenize_tool --chat ...");
  }
  bool add_special = true, parse_special = true, batch = false, info = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--add-special" && i + 1 < args.size()) {
      add_special = args[++i] != "0";
    } else if (a == "--parse-special" && i + 1 < args.size()) {
      parse_special = args[++i] != "0";
    } else if (a == "--batch") {
      batch = true;
    } else if (a == "--info") {
      info = true;
    } else {
      return fail("unknown argument " + a);
    }
  }
  auto tok_r = load(args[0]);
  if (!tok_r.ok()) return fail(tok_r.status().to_string());
  const mnemo::Tokenizer& tok = tok_r.value();

  if (info) {
    json out;
    out["n_vocab"] = tok.n_vocab();
    out["type"] = tok.type() == mnemo::VocabType::kSpm ? "spm" : "bpe";
    out["pre"] = std::string(mnemo::pre_tokenizer_name(tok.pre()));
    out["bos"] = tok.bos();
    out["eos"] = tok.eos();
    out["eot"] = tok.eot();
    out["unk"] = tok.unk();
    out["pad"] = tok.pad();
    out["nl"] = tok.nl();
    out["add_bos"] = tok.add_bos();
    out["add_eos"] = tok.add_eos();
    out["add_space_prefix"] = tok.add_space_prefix();
    out["clean_spaces"] = tok.clean_spaces();
    out["eog"] = tok.eog_ids();
    out["chat_template"] = tok.chat_template();
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  if (batch) {
    json out = json::array();
    try {
      for (const auto& c : json::parse(read_stdin())) {
        std::string text;
        if (!from_hex(c.at("text_hex").get<std::string>(), &text)) return fail("bad text_hex");
        out.push_back(
            tokenize_json(tok, text, c.value("add_special", true), c.value("parse_special", true)));
      }
    } catch (const std::exception& e) {
      return fail(std::string("bad batch JSON: ") + e.what());
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::cout << tokenize_json(tok, read_stdin(), add_special, parse_special).dump() << "\n";
  return 0;
}
