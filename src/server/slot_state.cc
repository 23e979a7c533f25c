#include "server/slot_state.h"

namespace mnemo::server {
namespace {

Status not_yet() {
  return Status::not_supported(
      "sequence state save/restore and requantization are not available in this build yet "
      "(they come with include/mnemo/state.h, issue 5)");
}

}  // namespace

Result<size_t> save_slot_file(Context&, SeqId, const std::string&, const std::vector<TokenId>&) {
  return not_yet();
}

Result<size_t> load_slot_file(Context&, SeqId, const std::string&, std::vector<TokenId>*) {
  return not_yet();
}

Status requantize_memory(Context&, SeqId, GgmlType, GgmlType) { return not_yet(); }

}  // namespace mnemo::server
