// ResponseStore (response_store.h): an LRU list and an index by id under one mutex.
#include "server/response_store.h"

#include <utility>

namespace mnemo::server {

bool ResponseStore::put(StoredResponse r) {
  // A generation cut by its token limit can end inside a UTF-8 character; such bytes count as the
  // U+FFFD they are shown as instead of throwing.
  const auto size = [](const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
  };
  r.bytes = size(r.response) + size(r.messages);
  if (r.bytes > max_bytes_ || max_count_ == 0) return false;
  auto entry = std::make_shared<const StoredResponse>(std::move(r));
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = by_id_.find(entry->id); it != by_id_.end()) {
    bytes_ -= (*it->second)->bytes;
    lru_.erase(it->second);
    by_id_.erase(it);
  }
  lru_.push_front(entry);
  by_id_[entry->id] = lru_.begin();
  bytes_ += entry->bytes;
  ++stored_total_;
  evict_locked();
  return true;
}

void ResponseStore::evict_locked() {
  // The newest entry fits on its own (put checked), so it is never the one evicted.
  while (lru_.size() > max_count_ || bytes_ > max_bytes_) {
    const Entry& last = lru_.back();
    bytes_ -= last->bytes;
    by_id_.erase(last->id);
    lru_.pop_back();
    ++evicted_total_;
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(std::string_view id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = by_id_.find(std::string(id));
  if (it == by_id_.end()) {
    ++misses_total_;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_total_;
  return *it->second;
}

bool ResponseStore::erase(std::string_view id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = by_id_.find(std::string(id));
  if (it == by_id_.end()) return false;
  bytes_ -= (*it->second)->bytes;
  lru_.erase(it->second);
  by_id_.erase(it);
  return true;
}

ResponseStoreStats ResponseStore::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  ResponseStoreStats s;
  s.count = lru_.size();
  s.bytes = bytes_;
  s.max_count = max_count_;
  s.max_bytes = max_bytes_;
  s.stored_total = stored_total_;
  s.evicted_total = evicted_total_;
  s.hits_total = hits_total_;
  s.misses_total = misses_total_;
  return s;
}

std::vector<MetricValue> response_store_metrics(const ResponseStoreStats& s) {
  return {
      {"responses_stored", "gauge", "Responses kept for previous_response_id (/v1/responses).",
       double(s.count)},
      {"responses_bytes", "gauge", "Bytes of the kept responses and their conversations.",
       double(s.bytes)},
      {"responses_max", "gauge", "Responses kept at most (--responses-max).", double(s.max_count)},
      {"responses_max_bytes", "gauge", "Bytes of responses kept at most (--responses-max-mb).",
       double(s.max_bytes)},
      {"responses_stored_total", "counter", "Responses stored.", double(s.stored_total)},
      {"responses_evicted_total", "counter",
       "Kept responses dropped for the bounds (least recently used first).",
       double(s.evicted_total)},
      {"responses_hits_total", "counter", "Lookups of a response id that found it.",
       double(s.hits_total)},
      {"responses_misses_total", "counter",
       "Lookups of a response id that did not (never stored, evicted, deleted).",
       double(s.misses_total)},
  };
}

}  // namespace mnemo::server
