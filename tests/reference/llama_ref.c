/*
 * llama_ref: produces mnemo's reference fixtures with llama.cpp's C API (libllama).
 * Built and run inside the peer chroot by tests/reference/make_fixtures.sh; never linked into
 * mnemo. Writes one JSON document per run.
 *
 *   llama_ref tokenize MODEL CASES.tsv OUT.json [KEY=VALUE ...]
 *   llama_ref logits   MODEL CASES.tsv OUT.json [KEY=VALUE ...]
 *   llama_ref generate MODEL CASES.tsv OUT.json [KEY=VALUE ...]
 *
 * CASES.tsv has one case per line, fields separated by tabs, byte strings hex-encoded so that any
 * byte (tabs, newlines, NUL-free UTF-8) survives:
 *   NAME <tab> text <tab> HEX                       -> the text as is
 *   NAME <tab> chat <tab> ROLE <tab> HEX [<tab> ROLE <tab> HEX ...]
 *                                                   -> messages formatted with the model's chat
 *                                                      template by llama_chat_apply_template
 * KEY=VALUE pairs are copied as strings into the document's "meta" object.
 *
 * Settings: CPU only, 2 threads, n_ctx = n_batch = n_ubatch = 1024, one sequence, llama.cpp's
 * default flash attention (auto -> enabled on CPU) and f16 K/V cache, weights NOT repacked
 * (use_extra_bufts = false, see load_model). Environment, for comparisons only:
 *   LLAMA_REF_EXTRA_BUFTS=1         llama.cpp's default weight repacking (CPU_REPACK / AMX)
 *   LLAMA_REF_CPU_BACKEND=FILE.so   load this CPU backend build instead of the best one
 *   LLAMA_REF_LOG_ALL=1             copy all of llama.cpp's log to stderr
 */
#include <ggml-backend.h>
#include <llama.h>

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP_K 20
#define N_THREADS 2
#define N_CTX 1024
#define N_PREDICT 32

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "llama_ref: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of memory");
  return p;
}

/* ---- byte strings ---- */

typedef struct {
  char *data;
  size_t len;
} bytes_t;

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bytes_t from_hex(const char *hex) {
  size_t n = strlen(hex);
  if (n % 2) die("odd-length hex string");
  bytes_t b = {xmalloc(n / 2 + 1), n / 2};
  for (size_t i = 0; i < n / 2; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) die("bad hex digit in '%s'", hex);
    b.data[i] = (char)(hi * 16 + lo);
  }
  b.data[b.len] = 0;
  return b;
}

static bool valid_utf8(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k;
    unsigned min;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xE0) == 0xC0) { k = 1; min = 0x80; c &= 0x1F; }
    else if ((c & 0xF0) == 0xE0) { k = 2; min = 0x800; c &= 0x0F; }
    else if ((c & 0xF8) == 0xF0) { k = 3; min = 0x10000; c &= 0x07; }
    else return false;
    if (i + k >= n) return false; /* truncated sequence */
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      c = (c << 6) | (s[i + j] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
    i += k + 1;
  }
  return true;
}

/* ---- JSON output ---- */

static FILE *out;

static void json_str(const char *s, size_t n) {
  fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\r': fputs("\\r", out); break;
      case '\t': fputs("\\t", out); break;
      default:
        if (c < 0x20 || c == 0x7F) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
  }
  fputc('"', out);
}

static void json_cstr(const char *s) { json_str(s, strlen(s)); }

/* A byte string as a JSON string when it is valid UTF-8, else null. */
static void json_text_or_null(const char *s, size_t n) {
  if (valid_utf8((const unsigned char *)s, n)) json_str(s, n);
  else fputs("null", out);
}

static void json_hex(const char *s, size_t n) {
  fputc('"', out);
  for (size_t i = 0; i < n; i++) fprintf(out, "%02x", (unsigned char)s[i]);
  fputc('"', out);
}

static void json_ids(const llama_token *ids, int n) {
  fputc('[', out);
  for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", ids[i]);
  fputc(']', out);
}

/* Floats with 9 significant digits: enough to round-trip a float32. */
static void json_num(double v) {
  if (isinf(v) || isnan(v)) fputs("null", out);
  else fprintf(out, "%.9g", v);
}

/* ---- cases ---- */

typedef struct {
  char *name;
  char *kind; /* "text" or "chat" */
  int n_msg;
  char **roles;
  bytes_t *contents; /* one for "text" */
} case_t;

static case_t *read_cases(const char *path, int *n_out) {
  FILE *f = fopen(path, "r");
  if (!f) die("cannot open %s", path);
  case_t *cases = NULL;
  int n = 0;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) >= 0) {
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (len == 0) continue;
    char *fields[64];
    int nf = 0;
    char *p = line;
    for (;;) {
      if (nf == 64) die("too many fields in %s", path);
      fields[nf++] = p;
      char *t = strchr(p, '\t');
      if (!t) break;
      *t = 0;
      p = t + 1;
    }
    if (nf < 3) die("short line in %s", path);
    case_t c = {0};
    c.name = strdup(fields[0]);
    c.kind = strdup(fields[1]);
    if (strcmp(c.kind, "text") == 0) {
      if (nf != 3) die("case %s: text takes one field", c.name);
      c.n_msg = 1;
      c.roles = xmalloc(sizeof(char *));
      c.roles[0] = NULL;
      c.contents = xmalloc(sizeof(bytes_t));
      c.contents[0] = from_hex(fields[2]);
    } else if (strcmp(c.kind, "chat") == 0) {
      if ((nf - 2) % 2) die("case %s: chat takes ROLE HEX pairs", c.name);
      c.n_msg = (nf - 2) / 2;
      c.roles = xmalloc(sizeof(char *) * c.n_msg);
      c.contents = xmalloc(sizeof(bytes_t) * c.n_msg);
      for (int i = 0; i < c.n_msg; i++) {
        c.roles[i] = strdup(fields[2 + 2 * i]);
        c.contents[i] = from_hex(fields[3 + 2 * i]);
      }
    } else {
      die("case %s: unknown kind '%s'", c.name, c.kind);
    }
    cases = realloc(cases, sizeof(case_t) * (n + 1));
    if (!cases) die("out of memory");
    cases[n++] = c;
  }
  free(line);
  fclose(f);
  *n_out = n;
  return cases;
}

/* The model's chat template, or when its GGUF has none, the llama.cpp built-in template named after
   its architecture family ("gemma" for gemma*, else "chatml"). *source says which. */
static const char *chat_template(const struct llama_model *model, const char **source) {
  const char *tmpl = llama_model_chat_template(model, NULL);
  if (tmpl) {
    if (source) *source = "gguf";
    return tmpl;
  }
  char arch[64];
  if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) < 0) arch[0] = 0;
  tmpl = strncmp(arch, "gemma", 5) == 0 ? "gemma" : "chatml";
  if (source) *source = strcmp(tmpl, "gemma") == 0 ? "llama.cpp built-in 'gemma' (the GGUF has no template)"
                                                  : "llama.cpp built-in 'chatml' (the GGUF has no template)";
  return tmpl;
}

/* The prompt text of a case: the text itself, or the chat formatted by llama.cpp. */
static bytes_t case_prompt(const struct llama_model *model, const case_t *c) {
  if (strcmp(c->kind, "text") == 0) return c->contents[0];
  const char *tmpl = chat_template(model, NULL);
  struct llama_chat_message *msgs = xmalloc(sizeof(*msgs) * c->n_msg);
  size_t total = 0;
  for (int i = 0; i < c->n_msg; i++) {
    msgs[i].role = c->roles[i];
    msgs[i].content = c->contents[i].data;
    total += c->contents[i].len + 64;
  }
  int32_t cap = (int32_t)(2 * total + 256);
  char *buf = xmalloc(cap);
  int32_t n = llama_chat_apply_template(tmpl, msgs, c->n_msg, true, buf, cap);
  if (n > cap) {
    cap = n + 1;
    buf = realloc(buf, cap);
    n = llama_chat_apply_template(tmpl, msgs, c->n_msg, true, buf, cap);
  }
  if (n < 0) die("case %s: llama_chat_apply_template does not know this model's template", c->name);
  free(msgs);
  bytes_t b = {buf, (size_t)n};
  return b;
}

/* ---- llama helpers ---- */

static char *log_capture; /* log lines worth keeping in the fixture */
static size_t log_capture_len;

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
  (void)ud;
  static int log_all = -1;
  if (log_all < 0) log_all = getenv("LLAMA_REF_LOG_ALL") != NULL;
  if (log_all) fputs(text, stderr);
  if (strstr(text, "flash_attn") || strstr(text, "Flash Attention") || strstr(text, "load_backend") ||
      strstr(text, "llama_kv_cache: size") || strstr(text, "REPACK") || strstr(text, "AMX")) {
    size_t n = strlen(text);
    log_capture = realloc(log_capture, log_capture_len + n + 1);
    memcpy(log_capture + log_capture_len, text, n + 1);
    log_capture_len += n;
  }
  if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static llama_token *tokenize(const struct llama_vocab *vocab, const char *text, size_t len,
                             bool add_special, bool parse_special, int *n_out) {
  int cap = (int)len + 16;
  llama_token *ids = xmalloc(sizeof(llama_token) * cap);
  int n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
  if (n < 0) {
    cap = -n;
    ids = realloc(ids, sizeof(llama_token) * cap);
    n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, add_special, parse_special);
  }
  if (n < 0) die("llama_tokenize failed");
  *n_out = n;
  return ids;
}

static bytes_t piece(const struct llama_vocab *vocab, llama_token id, bool special) {
  int cap = 64;
  char *buf = xmalloc(cap);
  int n = llama_token_to_piece(vocab, id, buf, cap, 0, special);
  if (n < 0) {
    cap = -n;
    buf = realloc(buf, cap);
    n = llama_token_to_piece(vocab, id, buf, cap, 0, special);
  }
  if (n < 0) die("llama_token_to_piece failed for %d", id);
  bytes_t b = {buf, (size_t)n};
  return b;
}

static bytes_t detokenize(const struct llama_vocab *vocab, const llama_token *ids, int n,
                          bool remove_special, bool unparse_special) {
  int cap = 16 * n + 16;
  char *buf = xmalloc(cap);
  int m = llama_detokenize(vocab, ids, n, buf, cap, remove_special, unparse_special);
  if (m < 0) {
    cap = -m;
    buf = realloc(buf, cap);
    m = llama_detokenize(vocab, ids, n, buf, cap, remove_special, unparse_special);
  }
  if (m < 0) die("llama_detokenize failed");
  bytes_t b = {buf, (size_t)m};
  return b;
}

static const char *vocab_type_name(enum llama_vocab_type t) {
  switch (t) {
    case LLAMA_VOCAB_TYPE_SPM: return "spm";
    case LLAMA_VOCAB_TYPE_BPE: return "bpe";
    case LLAMA_VOCAB_TYPE_WPM: return "wpm";
    case LLAMA_VOCAB_TYPE_UGM: return "ugm";
    case LLAMA_VOCAB_TYPE_RWKV: return "rwkv";
    default: return "other";
  }
}

static void json_meta_str(const struct llama_model *model, const char *key, bool comma) {
  char buf[4096];
  int n = llama_model_meta_val_str(model, key, buf, sizeof buf);
  fprintf(out, "%s\n    ", comma ? "," : "");
  json_cstr(key);
  fputs(": ", out);
  if (n < 0) fputs("null", out);
  else json_cstr(buf);
}

static void json_token_or_null(llama_token t) {
  if (t < 0) fputs("null", out);
  else fprintf(out, "%d", t);
}

/* Common head of every document: schema, meta (KEY=VALUE args + llama.cpp facts), model. */
static void write_head(const char *schema, const char *model_path, const struct llama_model *model,
                       int argc, char **argv) {
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  fputs("{\n  \"schema\": ", out);
  json_cstr(schema);
  fputs(",\n  \"meta\": {", out);
  fputs("\n    \"generator\": \"tests/reference/llama_ref.c via tests/reference/make_fixtures.sh\"", out);
  fputs(",\n    \"llama_version\": ", out);
  json_cstr(llama_version());
  for (int i = 0; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    if (!eq) die("expected KEY=VALUE, got '%s'", argv[i]);
    fputs(",\n    ", out);
    json_str(argv[i], (size_t)(eq - argv[i]));
    fputs(": ", out);
    json_cstr(eq + 1);
  }
  fputs(",\n    \"system_info\": ", out);
  json_cstr(llama_print_system_info());
  fputs("\n  },\n  \"model\": {\n    \"file\": ", out);
  const char *base = strrchr(model_path, '/');
  json_cstr(base ? base + 1 : model_path);
  char desc[256];
  llama_model_desc(model, desc, sizeof desc);
  fputs(",\n    \"desc\": ", out);
  json_cstr(desc);
  fprintf(out, ",\n    \"n_params\": %llu", (unsigned long long)llama_model_n_params(model));
  fprintf(out, ",\n    \"n_vocab\": %d", llama_vocab_n_tokens(vocab));
  fprintf(out, ",\n    \"vocab_type\": \"%s\"", vocab_type_name(llama_vocab_type(vocab)));
  fputs(",\n    \"bos\": ", out);
  json_token_or_null(llama_vocab_bos(vocab));
  fputs(",\n    \"eos\": ", out);
  json_token_or_null(llama_vocab_eos(vocab));
  fputs(",\n    \"eot\": ", out);
  json_token_or_null(llama_vocab_eot(vocab));
  fprintf(out, ",\n    \"add_bos\": %s", llama_vocab_get_add_bos(vocab) ? "true" : "false");
  fprintf(out, ",\n    \"add_eos\": %s", llama_vocab_get_add_eos(vocab) ? "true" : "false");
  json_meta_str(model, "general.architecture", true);
  json_meta_str(model, "general.name", true);
  json_meta_str(model, "tokenizer.ggml.model", true);
  json_meta_str(model, "tokenizer.ggml.pre", true);
  fputs("\n  }", out);
}

static bool extra_bufts(void) { return getenv("LLAMA_REF_EXTRA_BUFTS") != NULL; }

static struct llama_model *load_model(const char *path) {
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  /* No weight repacking into extra buffer types (CPU_REPACK, AMX) unless LLAMA_REF_EXTRA_BUFTS=1:
     llama.cpp's default repacks, and then results depend on the machine (AMX on Intel Sapphire
     Rapids differs from the plain kernels by up to ~0.3 in log-probability), while the plain
     kernels give the same bits with the zen4 and sapphirerapids CPU backend builds. */
  mp.use_extra_bufts = extra_bufts();
  struct llama_model *model = llama_model_load_from_file(path, mp);
  if (!model) die("cannot load model %s", path);
  return model;
}

static struct llama_context *make_context(struct llama_model *model) {
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = N_CTX;
  cp.n_batch = N_CTX;
  cp.n_ubatch = N_CTX;
  cp.n_seq_max = 1;
  cp.n_threads = N_THREADS;
  cp.n_threads_batch = N_THREADS;
  /* flash_attn_type, type_k, type_v stay at llama.cpp's defaults (auto, f16, f16). */
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create context");
  return ctx;
}

static void write_settings(const struct llama_context *ctx, const char *extra) {
  struct llama_context_params cp = llama_context_default_params();
  fputs(",\n  \"settings\": {", out);
  fprintf(out, "\n    \"n_ctx\": %u, \"n_batch\": %u, \"n_ubatch\": %u, \"n_seq\": 1,", llama_n_ctx(ctx),
          llama_n_batch(ctx), llama_n_ubatch(ctx));
  fprintf(out, "\n    \"n_threads\": %d, \"n_gpu_layers\": 0, \"backend\": \"CPU\",", N_THREADS);
  fprintf(out, "\n    \"flash_attn_type\": \"%s\", \"type_k\": \"%s\", \"type_v\": \"%s\",",
          llama_flash_attn_type_name(cp.flash_attn_type), ggml_type_name(cp.type_k),
          ggml_type_name(cp.type_v));
  fprintf(out, "\n    \"use_extra_bufts\": %s,", extra_bufts() ? "true" : "false");
  fputs("\n    \"add_special\": true, \"parse_special\": true,", out);
  fputs("\n    \"llama_log\": ", out);
  json_str(log_capture ? log_capture : "", log_capture_len);
  if (extra) fputs(extra, out);
  fputs("\n  }", out);
}

/* ---- tokenize ---- */

static const struct {
  const char *name;
  bool add_special, parse_special;
  const char *cli;
} FLAG_SETS[] = {
    /* llama-tokenize turns escape sequences (backslash-n, backslash-t, ...) in its input into bytes by
       default: --no-escape keeps the input bytes exact, as the C API does. */
    {"default", true, true, "[\"--no-escape\"]"},
    {"no_bos", false, true, "[\"--no-escape\", \"--no-bos\"]"},
    {"no_parse_special", true, false, "[\"--no-escape\", \"--no-parse-special\"]"},
    {"raw", false, false, "[\"--no-escape\", \"--no-bos\", \"--no-parse-special\"]"},
};
#define N_FLAG_SETS (sizeof FLAG_SETS / sizeof FLAG_SETS[0])

static void run_tokenize(const char *model_path, case_t *cases, int n_cases, int argc, char **argv) {
  struct llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  struct llama_model *model = llama_model_load_from_file(model_path, mp);
  if (!model) die("cannot load model %s", model_path);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  write_head("mnemo-tokenize-v1", model_path, model, argc, argv);

  fputs(",\n  \"flag_sets\": [", out);
  for (size_t f = 0; f < N_FLAG_SETS; f++) {
    fprintf(out,
            "%s\n    {\"name\": \"%s\", \"add_special\": %s, \"parse_special\": %s, "
            "\"llama_tokenize_flags\": %s}",
            f ? "," : "", FLAG_SETS[f].name, FLAG_SETS[f].add_special ? "true" : "false",
            FLAG_SETS[f].parse_special ? "true" : "false", FLAG_SETS[f].cli);
  }
  fputs("\n  ],\n  \"piece_flags\": {\"lstrip\": 0, \"special\": true},", out);
  fputs("\n  \"detok_flags\": {\"detok\": {\"remove_special\": false, \"unparse_special\": true}, "
        "\"detok_plain\": {\"remove_special\": true, \"unparse_special\": false}},",
        out);
  fputs("\n  \"cases\": [", out);
  for (int i = 0; i < n_cases; i++) {
    case_t *c = &cases[i];
    if (strcmp(c->kind, "text") != 0) die("tokenize case %s must be text", c->name);
    bytes_t text = c->contents[0];
    fprintf(out, "%s\n    {\n      \"name\": ", i ? "," : "");
    json_cstr(c->name);
    fputs(",\n      \"text\": ", out);
    json_text_or_null(text.data, text.len);
    fputs(",\n      \"text_hex\": ", out);
    json_hex(text.data, text.len);
    fputs(",\n      \"results\": {", out);
    for (size_t f = 0; f < N_FLAG_SETS; f++) {
      int n;
      llama_token *ids =
          tokenize(vocab, text.data, text.len, FLAG_SETS[f].add_special, FLAG_SETS[f].parse_special, &n);
      fprintf(out, "%s\n        \"%s\": {\n          \"ids\": ", f ? "," : "", FLAG_SETS[f].name);
      json_ids(ids, n);
      fputs(",\n          \"pieces\": [", out);
      for (int k = 0; k < n; k++) {
        bytes_t p = piece(vocab, ids[k], true);
        if (k) fputs(", ", out);
        json_text_or_null(p.data, p.len);
        free(p.data);
      }
      fputs("],\n          \"pieces_hex\": [", out);
      for (int k = 0; k < n; k++) {
        bytes_t p = piece(vocab, ids[k], true);
        if (k) fputs(", ", out);
        json_hex(p.data, p.len);
        free(p.data);
      }
      fputs("],\n          \"detok\": ", out);
      bytes_t d = detokenize(vocab, ids, n, false, true);
      json_text_or_null(d.data, d.len);
      free(d.data);
      fputs(",\n          \"detok_plain\": ", out);
      d = detokenize(vocab, ids, n, true, false);
      json_text_or_null(d.data, d.len);
      free(d.data);
      fputs("\n        }", out);
      free(ids);
    }
    fputs("\n      }\n    }", out);
  }
  fputs("\n  ]\n}\n", out);
  llama_model_free(model);
}

/* ---- logits ---- */

typedef struct {
  int id;
  float logit;
} cand_t;

static int cand_cmp(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return x->id - y->id;
}

/* Top-k of a logit row by logit (ties: lower id first), with log-softmax in double. */
static double row_stats(const float *row, int n_vocab, cand_t *top, int k) {
  float mx = row[0];
  for (int v = 1; v < n_vocab; v++) mx = row[v] > mx ? row[v] : mx;
  double sum = 0.0;
  for (int v = 0; v < n_vocab; v++) sum += exp((double)row[v] - (double)mx);
  /* partial selection: keep a sorted array of the best k */
  int filled = 0;
  for (int v = 0; v < n_vocab; v++) {
    cand_t c = {v, row[v]};
    if (filled == k && cand_cmp(&c, &top[k - 1]) >= 0) continue;
    int pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && cand_cmp(&c, &top[pos - 1]) < 0) {
      top[pos] = top[pos - 1];
      pos--;
    }
    top[pos] = c;
  }
  return (double)mx + log(sum);
}

static void decode_all(struct llama_context *ctx, const llama_token *ids, int n, bool all_logits) {
  struct llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; i++) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = all_logits || i == n - 1;
  }
  batch.n_tokens = n;
  int rc = llama_decode(ctx, batch);
  if (rc != 0) die("llama_decode failed (%d)", rc);
  llama_batch_free(batch);
}

static void json_messages(const case_t *c) {
  fputs("[", out);
  for (int m = 0; m < c->n_msg; m++) {
    fputs(m ? ", {\"role\": " : "{\"role\": ", out);
    json_cstr(c->roles[m]);
    fputs(", \"content\": ", out);
    json_text_or_null(c->contents[m].data, c->contents[m].len);
    fputs("}", out);
  }
  fputs("]", out);
}

static void write_prompt_head(const struct llama_model *model, const case_t *c, bytes_t prompt, const llama_token *ids, int n) {
  fputs("\n      \"name\": ", out);
  json_cstr(c->name);
  fprintf(out, ",\n      \"kind\": \"%s\"", c->kind);
  if (strcmp(c->kind, "chat") == 0) {
    const char *source;
    chat_template(model, &source);
    fputs(",\n      \"chat_template\": ", out);
    json_cstr(source);
    fputs(",\n      \"add_assistant_prefix\": true", out);
    fputs(",\n      \"messages\": ", out);
    json_messages(c);
  }
  fputs(",\n      \"text\": ", out);
  json_text_or_null(prompt.data, prompt.len);
  fprintf(out, ",\n      \"n_tokens\": %d,\n      \"tokens\": ", n);
  json_ids(ids, n);
}

static void run_logits(const char *model_path, case_t *cases, int n_cases, int argc, char **argv) {
  struct llama_model *model = load_model(model_path);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  int n_vocab = llama_vocab_n_tokens(vocab);
  struct llama_context *ctx = make_context(model);
  write_head("mnemo-logits-v1", model_path, model, argc, argv);
  char extra[256];
  snprintf(extra, sizeof extra,
           ",\n    \"top_k\": %d, \"logits_for_all_positions\": true, \"one_batch_per_prompt\": true,"
           "\n    \"logprob\": \"log_softmax over the full vocabulary, float32 logits, double accumulation\"",
           TOP_K);
  write_settings(ctx, extra);
  fputs(",\n  \"prompts\": [", out);
  cand_t top[TOP_K];
  for (int i = 0; i < n_cases; i++) {
    case_t *c = &cases[i];
    bytes_t prompt = case_prompt(model, c);
    int n;
    llama_token *ids = tokenize(vocab, prompt.data, prompt.len, true, true, &n);
    if (n + 1 > N_CTX) die("prompt %s too long", c->name);
    llama_memory_clear(llama_get_memory(ctx), true);
    decode_all(ctx, ids, n, true);

    int *top1 = xmalloc(sizeof(int) * n);
    double *lse = xmalloc(sizeof(double) * n), *next_lp = xmalloc(sizeof(double) * n);
    int *top_ids = xmalloc(sizeof(int) * n * TOP_K);
    double *top_lp = xmalloc(sizeof(double) * n * TOP_K);
    for (int p = 0; p < n; p++) {
      const float *row = llama_get_logits_ith(ctx, p);
      if (!row) die("no logits at position %d", p);
      lse[p] = row_stats(row, n_vocab, top, TOP_K);
      top1[p] = top[0].id;
      for (int k = 0; k < TOP_K; k++) {
        top_ids[p * TOP_K + k] = top[k].id;
        top_lp[p * TOP_K + k] = (double)top[k].logit - lse[p];
      }
      next_lp[p] = p + 1 < n ? (double)row[ids[p + 1]] - lse[p] : NAN;
    }

    fprintf(out, "%s\n    {", i ? "," : "");
    write_prompt_head(model, c, prompt, ids, n);
    fputs(",\n      \"top1\": ", out);
    json_ids(top1, n);
    fputs(",\n      \"logsumexp\": [", out);
    for (int p = 0; p < n; p++) {
      if (p) fputs(", ", out);
      json_num(lse[p]);
    }
    fputs("],\n      \"next_logprob\": [", out);
    for (int p = 0; p + 1 < n; p++) {
      if (p) fputs(", ", out);
      json_num(next_lp[p]);
    }
    fputs("],\n      \"top_ids\": [", out);
    for (int p = 0; p < n; p++) {
      fputs(p ? ",\n        " : "\n        ", out);
      json_ids(top_ids + p * TOP_K, TOP_K);
    }
    fputs("\n      ],\n      \"top_logprobs\": [", out);
    for (int p = 0; p < n; p++) {
      fputs(p ? ",\n        [" : "\n        [", out);
      for (int k = 0; k < TOP_K; k++) {
        if (k) fputs(", ", out);
        json_num(top_lp[p * TOP_K + k]);
      }
      fputs("]", out);
    }
    fputs("\n      ]\n    }", out);
    free(top1), free(lse), free(next_lp), free(top_ids), free(top_lp), free(ids);
  }
  fputs("\n  ]\n}\n", out);
  llama_free(ctx);
  llama_model_free(model);
}

/* ---- generate ---- */

static void run_generate(const char *model_path, case_t *cases, int n_cases, int argc, char **argv) {
  struct llama_model *model = load_model(model_path);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  int n_vocab = llama_vocab_n_tokens(vocab);
  struct llama_context *ctx = make_context(model);
  write_head("mnemo-generate-v1", model_path, model, argc, argv);
  char extra[320];
  snprintf(extra, sizeof extra,
           ",\n    \"n_predict\": %d, \"stop_at_eog\": true,"
           "\n    \"sampling\": \"greedy: argmax of the logits over the full vocabulary (ties: lowest id)\","
           "\n    \"decode\": \"prompt in one batch, then one token per llama_decode\"",
           N_PREDICT);
  write_settings(ctx, extra);
  fputs(",\n  \"prompts\": [", out);
  cand_t top[1];
  for (int i = 0; i < n_cases; i++) {
    case_t *c = &cases[i];
    bytes_t prompt = case_prompt(model, c);
    int n;
    llama_token *ids = tokenize(vocab, prompt.data, prompt.len, true, true, &n);
    if (n + N_PREDICT > N_CTX) die("prompt %s too long", c->name);
    llama_memory_clear(llama_get_memory(ctx), true);
    decode_all(ctx, ids, n, false);
    llama_token gen[N_PREDICT];
    double gen_lp[N_PREDICT];
    int n_gen = 0;
    bool eog = false;
    for (;;) {
      const float *row = llama_get_logits_ith(ctx, -1);
      double lse = row_stats(row, n_vocab, top, 1);
      gen[n_gen] = top[0].id;
      gen_lp[n_gen] = (double)top[0].logit - lse;
      n_gen++;
      if (llama_vocab_is_eog(vocab, top[0].id)) { eog = true; break; }
      if (n_gen == N_PREDICT) break;
      struct llama_batch batch = llama_batch_init(1, 0, 1);
      batch.token[0] = top[0].id;
      batch.pos[0] = n + n_gen - 1;
      batch.n_seq_id[0] = 1;
      batch.seq_id[0][0] = 0;
      batch.logits[0] = 1;
      batch.n_tokens = 1;
      int rc = llama_decode(ctx, batch);
      llama_batch_free(batch);
      if (rc != 0) die("llama_decode failed (%d)", rc);
    }
    fprintf(out, "%s\n    {", i ? "," : "");
    write_prompt_head(model, c, prompt, ids, n);
    fputs(",\n      \"generated\": ", out);
    json_ids(gen, n_gen);
    fputs(",\n      \"generated_logprobs\": [", out);
    for (int k = 0; k < n_gen; k++) {
      if (k) fputs(", ", out);
      json_num(gen_lp[k]);
    }
    fputs("],\n      \"generated_pieces_hex\": [", out);
    for (int k = 0; k < n_gen; k++) {
      bytes_t p = piece(vocab, gen[k], true);
      if (k) fputs(", ", out);
      json_hex(p.data, p.len);
      free(p.data);
    }
    fputs("],\n      \"generated_text\": ", out);
    bytes_t d = detokenize(vocab, gen, n_gen, false, true);
    json_text_or_null(d.data, d.len);
    free(d.data);
    fprintf(out, ",\n      \"stopped_at_eog\": %s\n    }", eog ? "true" : "false");
    free(ids);
  }
  fputs("\n  ]\n}\n", out);
  llama_free(ctx);
  llama_model_free(model);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: llama_ref tokenize|logits|generate MODEL CASES.tsv OUT.json [KEY=VALUE ...]\n");
    return 2;
  }
  const char *mode = argv[1], *model_path = argv[2], *cases_path = argv[3], *out_path = argv[4];
  llama_log_set(log_cb, NULL);
  /* LLAMA_REF_CPU_BACKEND=/usr/lib/.../libggml-cpu-VARIANT.so forces one CPU backend build (for
     comparisons); by default ggml picks the best one this CPU supports. */
  if (getenv("LLAMA_REF_CPU_BACKEND")) {
    if (!ggml_backend_load(getenv("LLAMA_REF_CPU_BACKEND"))) die("cannot load %s", getenv("LLAMA_REF_CPU_BACKEND"));
  } else {
    ggml_backend_load_all();
  }
  llama_backend_init();
  int n_cases;
  case_t *cases = read_cases(cases_path, &n_cases);
  out = fopen(out_path, "w");
  if (!out) die("cannot write %s", out_path);
  if (strcmp(mode, "tokenize") == 0) run_tokenize(model_path, cases, n_cases, argc - 5, argv + 5);
  else if (strcmp(mode, "logits") == 0) run_logits(model_path, cases, n_cases, argc - 5, argv + 5);
  else if (strcmp(mode, "generate") == 0) run_generate(model_path, cases, n_cases, argc - 5, argv + 5);
  else die("unknown mode '%s'", mode);
  if (fclose(out) != 0) die("cannot write %s", out_path);
  llama_backend_free();
  return 0;
}
