// Engine: the server loop. One thread owns the Context (model + memory), the slots and the
// schedule; HTTP threads talk to it only through the queue below, with native structs
// (docs/design.md §1). Nothing here knows about HTTP or JSON.
//
// Files: engine.cc (construction, the queue and the loop), scheduler.cc (queueing, admission,
// batching, generation), slots.cc (slot lifecycle: start, context shift, finish, release, what
// a slot reports), control.cc (control requests: snapshots, slot save / restore / erase,
// requantization; the KV policy), engine_internal.h (the loop thread's private structs: Task,
// Slot, ...). Where a prompt's prefix comes from and where a slot's memory goes is PromptReuse's
// (prompt_reuse.h), which the engine owns and calls.
//
// Threads:
//   - HTTP threads call submit() (a completion: returns a TaskChannel to read events from) and
//     control() (slots / metrics snapshots, slot save / restore / erase, requantize: returns a
//     future). Both only lock the incoming queue.
//   - The loop thread (start() / stop()) drains the queue, runs control requests between
//     decode steps, admits waiting completions to slots and decodes one batch per step.
//
// Slots. Slot i decodes into sequence i of the memory (split mode: stream i). A slot is
//   kIdle        free; its held tokens (HeldSeq) stay in memory for prompt-cache reuse;
//   kPrompt      feeding its prompt in chunks (positions held.tokens.size() ...);
//   kGenerating  one sampled token pending per step.
// Invariant (DCHECKed): sequence i holds exactly positions [0, held.tokens.size()) and those
// cells hold held.tokens, in order.
//
// Scheduling of one step (continuous batching): every generating slot adds its pending token,
// then prompting slots add prompt chunks (round robin, within n_batch; within n_ubatch while
// any slot generates, so a long prompt stalls the others for one forward pass at most); one
// Context::decode;
// each slot with an output row samples its next token. A batch that does not fit (unified
// cache) is retried slot by slot so one full conversation does not stop the others.
//
// Admission (before any compute): a prompt of n_ctx_seq tokens or more is refused
// (kPromptTooLong). PromptReuse::plan finds the longest reusable prefix of the prompt
// (cache_prompt: true only): the slot's own tokens, every other slot's tokens (copied with
// seq_cp, as far as Memory::plan_truncate lets the copy be cut), the prompt cache's tiers and
// the shared store (restored from a sequence state, converting K/V types; a disk entry or the
// store's answer is awaited while the request waits). The cells the prompt needs are checked
// against the free cells the memory reports for the slot's sequence (Memory::seq_info; a recurrent
// state has no cells to run out of). In unified mode idle slots' caches are dropped, least recently
// used first, when that makes the prompt fit; otherwise kCacheFull.
//
// The prompt cache (src/prompt_cache/prompt_cache.h): whenever a slot's memory is about to be
// dropped — the slot taken by another conversation (losing 16 tokens or more), an
// erase, a restore over it, an eviction, the server's shutdown — PromptReuse::stash puts its
// sequence state into the cache, unless its request asked for cache_prompt: false. On shutdown
// the cache is flushed to disk.
//
// The engine asks the memory only through the Memory interface (seq_info, plan_truncate and the
// seq_* operations): it does not know which kind of memory it runs on, nor how its streams are
// laid out.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mnemo/context.h"
#include "mnemo/grammar.h"
#include "mnemo/kv_policy.h"
#include "mnemo/memory.h"
#include "mnemo/model.h"
#include "mnemo/quant.h"
#include "mnemo/speculative.h"
#include "mnemo/sampling.h"
#include "mnemo/status.h"
#include "mnemo/tokenizer.h"
#include "prompt_cache/prompt_cache.h"
#include "prompt_cache/store.h"
#include "server/errors.h"
#include "server/metrics.h"
#include "server/prompt_reuse.h"

namespace mnemo::server {

/// How a completion ended.
enum class FinishReason : uint8_t {
  kNone = 0,
  kEos,        // an end-of-generation token (OpenAI "stop")
  kWord,       // a stop string (OpenAI "stop")
  kLimit,      // n_predict tokens (OpenAI "length")
  kContext,    // the slot's context is full and context shift is off (OpenAI "length")
  kCancelled,  // the client went away
};

/// Log-probabilities of one generated token under the model's distribution (log-softmax of the
/// raw logits, before any sampler stage), and the most likely alternatives.
struct TokenProbs {
  TokenId id = 0;
  float logprob = 0;                           // of the token that was generated
  std::vector<std::pair<TokenId, float>> top;  // [n_probs] best first: (id, logprob)
  /// With CompletionRequest::post_sampling_probs: probabilities (not logs) of the distribution
  /// the sampler drew from (Sampler::last_distribution), in logprob and top.
  bool post_sampling = false;
};

/// A completion request after JSON parsing, templating and tokenization (HTTP thread).
struct CompletionRequest {
  std::vector<TokenId> prompt;  // non-empty; ids in [0, n_vocab)
  SamplingParams sampling;
  int32_t n_predict = 16;            // tokens to generate, >= 0 (already bounded)
  int32_t n_keep = 0;                // context shift keeps these first tokens; -1: the whole prompt
  std::vector<std::string> stop;     // stop strings (generation ends before the first match)
  int32_t id_slot = -1;              // a specific slot (waits for it), or -1: the best free one
  bool cache_prompt = true;          // reuse the slot's longest common prefix with the prompt
  bool ignore_eos = false;           // end-of-generation tokens are never sampled (llama-server's)
  int32_t n_probs = 0;               // > 0: report TokenProbs with this many alternatives
  bool post_sampling_probs = false;  // TokenProbs after the sampler's stages (llama-server's)
  bool return_progress = false;      // kProgress events while the prompt is read
  /// Structured output: what the generated text must match (GBNF, or a JSON schema made one);
  /// null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  /// With `grammar`: it applies only once the generated text contains one of these strings, to
  /// the text from that string on (a lazy grammar: tool calls under tool_choice "auto",
  /// Sampler::set_lazy_grammar). Empty: from the first token.
  std::vector<std::string> grammar_triggers;
  /// Tokens whose text goes into the generated text although they are control tokens (a chat
  /// format's markers, e.g. a tool-call opener that is a special token), so the text can be
  /// parsed; other control tokens add no text.
  std::vector<TokenId> preserved_tokens;
  /// The reasoning budget (llama-server's --reasoning-budget): once `budget` tokens were
  /// generated inside the reasoning (after `start` appeared in the text, or from the first token
  /// when `open`, until `end` appears), the tokens of `end` are generated next instead of
  /// sampled, and the answer follows. budget < 0: no limit (the rest is ignored).
  struct Reasoning {
    int32_t budget = -1;
    bool open = false;                // the prompt already opened the reasoning
    std::string start, end;           // the markers, e.g. "<think>" and "</think>"
    std::vector<TokenId> end_tokens;  // `end` tokenized (special tokens parsed)
  } reasoning;
};

/// Numbers of one completion, for responses, metrics and the request log line.
struct CompletionStats {
  int32_t id_slot = -1;
  int32_t n_prompt = 0;     // prompt tokens
  int32_t n_cached = 0;     // prompt tokens reused (not evaluated): from the slot, another slot
                            // or the prompt cache (timings.cache_n)
  int32_t n_generated = 0;  // tokens sampled (an end-of-generation token counts)
  int32_t n_shifts = 0;     // context shifts done
  int32_t n_drafted = 0;    // speculative decoding: tokens drafted and verified (draft_n)
  int32_t n_draft_accepted = 0;  // ... of which the target agreed with (draft_n_accepted)
  double prompt_ms = 0;     // admission to first sampled token
  double gen_ms = 0;        // first sampled token to the end
};

/// What the loop thread sends to the HTTP thread of a completion, in this order:
/// one kAdmitted (or one kError), then kText events, then one kDone (or one kError).
struct CompletionEvent {
  enum class Kind : uint8_t { kAdmitted, kProgress, kText, kDone, kError };
  Kind kind = Kind::kText;
  std::string text;               // kText: new text, whole UTF-8 characters, stop strings removed
  std::vector<TokenId> tokens;    // kText: tokens sampled since the previous event
  std::vector<TokenProbs> probs;  // kText with n_probs > 0: one per entry of tokens
  FinishReason finish = FinishReason::kNone;  // kDone
  std::string stop_word;                      // kDone with kWord: the stop string matched
  CompletionStats stats;  // kAdmitted (id_slot, n_prompt, n_cached), kText (so far), kDone (all)
  /// kProgress (CompletionRequest::return_progress): prompt tokens in the slot so far, the
  /// n_cached reused ones included (as llama-server counts: the last event has processed ==
  /// total), and ms since admission; sent at admission and after each prompt chunk.
  int32_t n_processed = 0;
  double progress_ms = 0;
  ErrorKind error_kind = ErrorKind::kInternal;  // kError
  std::string error;                            // kError: a message with the numbers
};

/// The one-way event stream of one completion plus its cancel flag. Shared by the HTTP thread
/// (reader, may cancel) and the loop thread (writer). Thread-safe.
class TaskChannel {
 public:
  /// Loop thread: appends an event and wakes the reader.
  void push(CompletionEvent ev);
  /// HTTP thread: the next event, or nullopt after `timeout` without one.
  std::optional<CompletionEvent> pop(std::chrono::milliseconds timeout);
  /// HTTP thread: the client went away; the loop frees the slot at its next step.
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CompletionEvent> events_;
  std::atomic<bool> cancelled_{false};
};

enum class SlotState : uint8_t { kIdle, kPrompt, kGenerating, kPreempted };
/// "idle", "prompt", "generating", "preempted".
const char* slot_state_name(SlotState s);

/// One slot as seen between two steps.
struct SlotInfo {
  int32_t id = 0;
  SlotState state = SlotState::kIdle;
  uint32_t n_ctx = 0;       // cells the slot may use (n_ctx_seq)
  int32_t n_tokens = 0;     // tokens held in memory (HeldSeq::tokens)
  int32_t n_prompt = 0;     // current request: prompt tokens (0 when idle)
  int32_t n_generated = 0;  // current request: tokens sampled so far
  int32_t n_cached = 0;     // current request: prompt tokens reused (not evaluated)
  int32_t n_predict = 0;    // current request: tokens it may generate (0 when idle)
  uint64_t id_task = 0;     // current request's id (0 when idle)
  bool speculative = false;  // the server drafts tokens (an n-gram drafter or a draft model)
  // The settings of the request served now or last (its prompt left out); null before the
  // first request.
  std::shared_ptr<const CompletionRequest> params;
  // K / V types of the slot's stream; nullopt when no attention K/V serves the slot (a
  // recurrent state alone).
  std::optional<GgmlType> type_k;
  std::optional<GgmlType> type_v;
  // Bytes serving the slot's sequence (Memory::seq_info): its K/V stream (unified: its share by
  // cells held), its recurrent state slot and checkpoints, or both.
  size_t bytes = 0;
};

/// Control requests, run by the loop thread between two decode steps.
enum class ControlKind : uint8_t { kSnapshot, kSlotSave, kSlotRestore, kSlotErase, kRequantize };

struct ControlRequest {
  ControlKind kind = ControlKind::kSnapshot;
  int32_t slot = -1;  // kSlot*: the slot; kRequantize: one slot, or -1 for the whole cache
  std::string path;   // kSlotSave / kSlotRestore: a path already validated by the caller
  // kRequantize: the target types; nullopt keeps the type the slot (the whole cache: slot 0)
  // has now.
  std::optional<GgmlType> type_k;
  std::optional<GgmlType> type_v;
};

/// The answer to a ControlRequest. When !status.ok(), error_kind says which HTTP error.
struct ControlReply {
  Status status;
  ErrorKind error_kind = ErrorKind::kInternal;
  // kSnapshot
  std::vector<SlotInfo> slots;
  MemoryBreakdown breakdown;
  int32_t n_processing = 0;  // busy slots (preempted ones included)
  int32_t n_preempted = 0;   // slots whose request waits preempted (its memory set aside)
  int32_t n_queued = 0;      // requests waiting for a slot
  // kSlot*: tokens saved / restored / erased and bytes written / read; kRequantize: bytes.
  int32_t n_tokens = 0;
  size_t bytes = 0;
  size_t bytes_before = 0;
  size_t bytes_after = 0;
  double ms = 0;
  // kRequantize: the types converted to (the request's, with the ones it left out filled in).
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  // kSnapshot: the prompt cache's numbers (nullopt without a local tier) and the shared
  // store's (nullopt without one).
  std::optional<prompt_cache::CacheStats> cache;
  std::optional<prompt_cache::StoreStats> store;
};

/// Static facts of a running engine (immutable after create(): readable from any thread).
struct EngineInfo {
  uint32_t n_ctx = 0;      // total cells (-c)
  uint32_t n_ctx_seq = 0;  // cells one slot may use
  uint32_t n_slots = 0;    // -np
  uint32_t n_batch = 0;
  uint32_t n_ubatch = 0;
  bool kv_unified = false;
  bool context_shift = false;
  int32_t n_threads = 0;
  std::string kv_policy;  // the ladder, "" when there is none
  // The prompt cache: RAM budget and disk directory / budget (0 / "" when off).
  size_t cache_ram_bytes = 0;
  std::string cache_dir;
  size_t cache_disk_bytes = 0;
};

/// Settings of an Engine.
struct EngineParams {
  ContextParams ctx;  // n_seq_max = number of slots
  bool context_shift = false;
  uint32_t max_queue = 256;  // waiting requests beyond this are refused (kQueueFull)
  /// --kv-policy: after each step, moves the least recently active slots down the K/V type
  /// ladder when the cache fills (include/mnemo/kv_policy.h).
  std::optional<KvPolicy> kv_policy;
  /// Where prompts' prefixes come from and where slots' memory goes (prompt_reuse.h): the
  /// prompt cache's tiers, the shared store (with it, a slot is also stashed when each request
  /// ends, so the next turn can land on another replica), KV events.
  PromptReuseParams reuse;
  /// Speculative decoding in every slot (include/mnemo/speculative.h): off unless spec.ngram
  /// or a draft model is given. The draft model and its tokenizer (not owned) must outlive the
  /// engine; its context gets ctx's sizes.
  SpecParams spec;
  const Model* draft_model = nullptr;
  const Tokenizer* draft_tokenizer = nullptr;
};

class Engine {
 public:
  /// Creates the Context (errors from Context::create). `model` and `tok` must outlive the
  /// engine. The loop does not run until start().
  static Result<std::unique_ptr<Engine>> create(const Model& model, const Tokenizer& tok,
                                                const EngineParams& params, Metrics* metrics);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Starts the loop thread.
  void start();
  /// Stops the loop thread (pending and running requests get a kError "shutting down") and
  /// joins it. Idempotent.
  void stop();

  /// Any thread: queues a completion. Returns its channel; kQueueFull when max_queue requests
  /// already wait (nothing queued then).
  Result<std::shared_ptr<TaskChannel>> submit(CompletionRequest req, ErrorKind* error_kind);
  /// Any thread: queues a control request; the future is fulfilled between two steps.
  std::future<ControlReply> control(ControlRequest req);

  const EngineInfo& info() const { return info_; }

 private:
  struct Slot;
  struct Task;
  struct Incoming;
  struct WorkItem;

  Engine(const Model& model, const Tokenizer& tok, Metrics* metrics);

  // The loop (engine.cc).
  void loop();
  // One pass over the incoming queue; blocks when `block` and it is empty.
  void drain(bool block);
  // Answers everything still queued or running with a "shutting down" error.
  void shut_down();

  // Scheduling (scheduler.cc).
  void check_cancelled();
  void assign_waiting();
  Slot* pick_slot(const Task& t);
  // Prepares `slot` for `t` (kAdmitted), or returns why not (kFailed: error kind + message), or
  // asks `t` to wait for a disk entry, the store or its slot's stash (kDeferred), or for cells of a shared stream
  // that running requests hold (kWait). On kFailed nothing changed except idle slots' caches
  // that admission decided to evict (stashed first); on kDeferred and kWait nothing changed.
  enum class Admission : uint8_t { kAdmitted, kFailed, kDeferred, kWait };
  Admission admit(Task& t, Slot& slot, ErrorKind* kind, std::string* why);
  // Whether `slot`'s sequence has the cells an n_prompt-token prompt needs once `src` is
  // applied and, in a shared stream (unified KV), the cells the running requests need before
  // their next token (reserved_cells); idle slots' memory is dropped for it (stashed first,
  // least recently used first) when that makes it fit. kWait: a shared stream that running
  // requests fill; kFailed (kind and message set: kCacheFull, or kInternal): a stream of its own
  // that cannot hold the prompt. Nothing changed but those evictions.
  enum class Room : uint8_t { kFits, kWait, kFailed };
  Room make_room(Slot& slot, const ReuseSource& src, size_t n_prompt, ErrorKind* kind,
                 std::string* why);
  // Unified KV: cells the busy slots other than `except` need before their next token: the rest
  // of a prompt being read, one for a generating slot (a preempted slot holds and needs none).
  uint32_t reserved_cells(const Slot* except) const;
  // Unified KV: the shared stream's free cells (SeqMemoryInfo::kUnbounded for a memory without
  // cells).
  uint32_t stream_free() const;
  // Unified KV: drops idle slots' memory (stashed first, least recently used first; never
  // `except`'s, nor `keep`, a prefix source) until `target` cells are free; with
  // `all_or_nothing`, only when that can reach it. Returns the free cells afterwards.
  uint32_t reclaim_idle(uint32_t target, const Slot* except, const HeldSeq* keep,
                        bool all_or_nothing);
  // Makes one step's items fit a full shared stream: idle slots' memory goes first, then the
  // prompt chunks of all but the oldest request shrink, then younger requests are preempted,
  // youngest first (their items leave `items`). No-op in split mode.
  void fit_step(std::vector<WorkItem>& items);
  // Sets a busy slot's memory aside (PromptReuse::suspend) and frees its cells; the slot keeps
  // its request, sampler, text stream and stats and waits as kPreempted.
  void preempt(Slot& slot);
  // Restores a preempted slot's memory when its cells, its next step's and the running
  // requests' next cells are free (idle slots' memory dropped for it). false: it still waits.
  bool resume(Slot& slot);
  // Resumes preempted slots, oldest admission first, until one cannot.
  void resume_preempted();
  void step();
  // Decodes the items as one batch; on kNoSpace with several items, one by one.
  void decode_items(std::vector<WorkItem>& items);
  void commit(WorkItem& item, uint32_t out_row);
  void on_token(Slot& slot, TokenId tok, std::span<const float> logits);
  // Follows the reasoning markers in a generated token's text `piece`; queues the end marker's
  // tokens once the reasoning budget is spent (CompletionRequest::reasoning).
  void track_reasoning(Slot& slot, const std::string& piece);

  // Slot lifecycle (slots.cc).
  // Starts serving `t` in `slot`, whose sequence holds the first n_cached prompt tokens.
  void begin(Task& t, Slot& slot, size_t n_cached);
  bool context_shift(Slot& slot);
  void finish(Slot& slot, FinishReason reason);
  /// Speculative decoding: removes the drafted positions past slot.spec_end from the memory and
  /// the slot's tokens (no-op when spec_end < 0), so a slot ends holding what plain decoding
  /// would have left.
  void drop_unverified(Slot& slot);
  /// Speculative decoding: the tokens to draft after slot's pending token (empty: none).
  std::vector<TokenId> draft_for(Slot& slot, uint32_t room);
  void fail(Slot& slot, ErrorKind kind, const std::string& why);
  void release(Slot& slot);
  // Wakes the loop (an asynchronous prompt-cache lookup finished). Any thread.
  void wake();
  void check_slot(const Slot& slot) const;
  // The slot as /slots reports it (types and bytes from Memory::seq_info).
  SlotInfo slot_info(const Slot& slot) const;
  // Every slot's held sequence (for PromptReuse).
  std::vector<HeldSeq*> held_seqs();

  // Control requests and the KV policy (control.cc).
  void run_control(ControlRequest& req, std::promise<ControlReply>& reply);
  ControlReply snapshot();
  ControlReply slot_save(const ControlRequest& req);
  ControlReply slot_restore(const ControlRequest& req);
  // The error reply for a slot control request naming a missing (404) or busy slot; nullopt
  // when the slot exists and is idle.
  std::optional<ControlReply> idle_slot_error(int32_t slot) const;
  ControlReply slot_erase(const ControlRequest& req);
  ControlReply requantize(const ControlRequest& req);
  void apply_policy();

  // A kProgress event of s's prompt (return_progress).
  void send_progress(const Slot& s, TaskChannel& channel);
  // The vocabulary's token texts for grammar masks (and a lazy grammar's triggers), with the
  // text of the request's preserved tokens (control tokens a chat format writes as markup, so a
  // grammar can match them); made at the first constrained request of each preserved set (the
  // server's chat format has one).
  const std::shared_ptr<const grammar::Vocab>& grammar_vocab(const std::vector<TokenId>& preserved);

  const Model& model_;
  const Tokenizer& tok_;
  std::map<std::vector<TokenId>, std::shared_ptr<const grammar::Vocab>>
      grammar_vocabs_;  // loop thread only
  Metrics* metrics_;
  EngineInfo info_;
  EngineParams params_;
  std::unique_ptr<Context> ctx_;  // loop thread only (after start())
  std::unique_ptr<DraftModel> drafter_;  // -md: the draft model (loop thread only)
  bool hparams_swa_ = false;             // the model has sliding-window layers
  // Where prompts' prefixes come from and where slots' memory goes: loop thread only; its
  // cache's and store's threads call wake().
  std::unique_ptr<PromptReuse> reuse_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::deque<std::unique_ptr<Task>> waiting_;  // loop thread: admitted to the queue, FIFO
  uint64_t clock_ = 0;       // loop thread: step counter for least-recently-used order
  uint64_t admissions_ = 0;  // loop thread: requests admitted so far (Slot::admitted)
  uint32_t rr_ = 0;          // loop thread: round-robin start for prompt chunks
  uint64_t steps_ = 0;       // loop thread: decode steps so far (slots' last_active)

  std::mutex mu_;  // guards incoming_, stop_
  std::condition_variable cv_;
  std::vector<Incoming> incoming_;  // swapped out whole by drain()
  bool stop_ = false;
  bool wake_ = false;                   // a fetch finished: drain() returns without incoming work
  std::atomic<uint32_t> n_waiting_{0};  // waiting_.size() + incoming completions (for submit)
  std::atomic<uint64_t> next_task_id_{1};
  std::thread thread_;
};

}  // namespace mnemo::server
