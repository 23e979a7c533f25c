// Tests for the GGUF reader on malformed files: one test per case, with the error code, the
// problem and the byte offset checked. The files are built byte by byte with RawFile below,
// independently of the Writer.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mnemo/gguf.h"

namespace mnemo::gguf {
namespace {

// Builds GGUF bytes by hand, little-endian.
class RawFile {
 public:
  RawFile& u8(uint8_t x) { return put(x); }
  RawFile& u32(uint32_t x) { return put(x); }
  RawFile& u64(uint64_t x) { return put(x); }
  RawFile& i32(int32_t x) { return put(x); }
  RawFile& str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  RawFile& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key with a u32 value.
  RawFile& kv_u32(std::string_view key, uint32_t v) {
    return str(key).u32(static_cast<uint32_t>(ValueType::UINT32)).u32(v);
  }
  RawFile& tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                       uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  RawFile& pad(uint64_t align) {
    while (bytes_.size() % align != 0) bytes_.push_back(0);
    return *this;
  }
  RawFile& zeros(size_t n) {
    bytes_.insert(bytes_.end(), n, 0);
    return *this;
  }
  uint64_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  template <typename T>
  RawFile& put(T x) {
    const auto* p = reinterpret_cast<const uint8_t*>(&x);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

constexpr uint32_t kTypeF32 = 0;
constexpr uint32_t kTypeQ4_0 = 2;

// Parses `raw` and expects failure with `code`, a message containing every piece of `needles`
// and naming `offset` as "byte offset N".
void expect_error(const RawFile& raw, StatusCode code, std::vector<std::string> needles,
                  uint64_t offset) {
  auto r = File::from_memory(raw.bytes());
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needles.at(0) << "'";
  const Status st = r.status();
  EXPECT_EQ(st.code(), code) << st.to_string();
  needles.push_back("byte offset " + std::to_string(offset));
  for (const std::string& n : needles) {
    EXPECT_NE(st.message().find(n), std::string::npos)
        << "message '" << st.message() << "' lacks '" << n << "'";
  }
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one test per case. Each checks the code, the problem and the byte offset.

TEST(GgufMalformed, EmptyFile) {
  expect_error(RawFile(), StatusCode::kCorruption, {"truncated", "magic"}, 0);
}

TEST(GgufMalformed, TruncatedHeader) {
  RawFile raw;
  raw.u32(kMagic).u32(3).u32(0);  // tensor count cut short
  expect_error(raw, StatusCode::kCorruption, {"truncated", "tensor count"}, 8);
}

TEST(GgufMalformed, WrongMagic) {
  RawFile raw;
  raw.u32(0x46554746).u32(3).u64(0).u64(0);
  expect_error(raw, StatusCode::kCorruption, {"bad magic 0x46554746"}, 0);
}

TEST(GgufMalformed, Version1IsNotSupported) {
  RawFile raw;
  raw.header(0, 0, /*version=*/1);
  expect_error(raw, StatusCode::kNotSupported, {"GGUF version 1 is not supported"}, 4);
}

TEST(GgufMalformed, UnknownVersionIsNotSupported) {
  RawFile raw;
  raw.header(0, 0, /*version=*/4);
  expect_error(raw, StatusCode::kNotSupported, {"GGUF version 4 is not supported"}, 4);
  RawFile zero;
  zero.header(0, 0, /*version=*/0);
  expect_error(zero, StatusCode::kNotSupported, {"GGUF version 0"}, 4);
}

TEST(GgufMalformed, BigEndianIsNotSupported) {
  RawFile raw;
  raw.header(0, 0, /*version=*/0x03000000);
  expect_error(raw, StatusCode::kNotSupported, {"big-endian"}, 4);
}

TEST(GgufMalformed, Version2IsRead) {
  RawFile raw;
  raw.header(1, 1, /*version=*/2).kv_u32("a", 7).tensor_info("t", {2}, kTypeF32, 0).pad(32);
  raw.zeros(8);
  auto f = File::from_memory(raw.bytes());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_uint("a").value(), 7u);
  EXPECT_EQ(f->tensors().at(0).n_bytes, 8u);
}

TEST(GgufMalformed, AbsurdTensorCount) {
  RawFile raw;
  raw.header(uint64_t{1} << 60, 0);
  expect_error(raw, StatusCode::kCorruption, {"tensor count 1152921504606846976"}, 8);
}

TEST(GgufMalformed, AbsurdKvCount) {
  RawFile raw;
  raw.header(0, uint64_t{1} << 60).kv_u32("a", 1);
  expect_error(raw, StatusCode::kCorruption, {"key/value count 1152921504606846976"}, 16);
}

TEST(GgufMalformed, KvCountLargerThanPresent) {
  // Room for the count check (2 x 13 bytes), not for a second kv: its empty key (8 bytes) is
  // followed by 1 byte where the u32 type belongs.
  RawFile raw;
  raw.header(0, 2).kv_u32("a", 1);
  const uint64_t at = raw.size() + 8;
  raw.zeros(9);
  expect_error(raw, StatusCode::kCorruption, {"truncated", "value type of key ''"}, at);
}

TEST(GgufMalformed, KeyLongerThanFile) {
  RawFile raw;
  raw.header(0, 1).u64(uint64_t{1} << 40).u32(4).u32(0);
  expect_error(raw, StatusCode::kCorruption, {"metadata key has length 1099511627776"}, 24);
}

TEST(GgufMalformed, StringValueLongerThanFile) {
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::STRING));
  const uint64_t at = raw.size();
  raw.u64(~uint64_t{0}).zeros(8);
  expect_error(raw, StatusCode::kCorruption,
               {"'k'", "string value has length 18446744073709551615"}, at);
}

TEST(GgufMalformed, HugeArray) {
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  raw.u32(static_cast<uint32_t>(ValueType::UINT8));
  const uint64_t at = raw.size();
  raw.u64(uint64_t{1} << 62).zeros(16);
  expect_error(raw, StatusCode::kCorruption, {"array of 4611686018427387904 uint8"}, at);
}

TEST(GgufMalformed, HugeArrayOfStrings) {
  // 100 bytes remain: 13 strings of 8 bytes cannot fit.
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  raw.u32(static_cast<uint32_t>(ValueType::STRING));
  const uint64_t at = raw.size();
  raw.u64(13).zeros(100);
  expect_error(raw, StatusCode::kCorruption, {"array of 13 string elements"}, at);
}

RawFile nested_arrays(int depth) {
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  for (int i = 1; i < depth; ++i) raw.u32(static_cast<uint32_t>(ValueType::ARRAY)).u64(1);
  raw.u32(static_cast<uint32_t>(ValueType::UINT8)).u64(0);
  return raw;
}

TEST(GgufMalformed, NestingTooDeep) {
  auto ok = File::from_memory(nested_arrays(kMaxArrayDepth).bytes());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  const RawFile deep = nested_arrays(kMaxArrayDepth + 1);
  // The 17th array's header starts after the 16 enclosing (type, count) pairs.
  const uint64_t at = 24 + 8 + 1 + 4 + 12 * kMaxArrayDepth;
  expect_error(deep, StatusCode::kCorruption, {"array nesting deeper than 16"}, at);
  // A very deep file (would overflow the stack without the bound) fails the same way.
  expect_error(nested_arrays(100000), StatusCode::kCorruption, {"nesting"}, at);
}

TEST(GgufMalformed, UnknownValueType) {
  RawFile raw;
  raw.header(0, 1).str("key1");
  const uint64_t at = raw.size();
  raw.u32(13).u32(0);
  expect_error(raw, StatusCode::kCorruption, {"unknown value type of key 'key1' 13"}, at);
}

TEST(GgufMalformed, UnknownArrayElementType) {
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  const uint64_t at = raw.size();
  raw.u32(77).u64(0);
  expect_error(raw, StatusCode::kCorruption, {"'k'", "unknown array element type 77"}, at);
}

TEST(GgufMalformed, BoolNotZeroOrOne) {
  RawFile raw;
  raw.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::BOOL));
  const uint64_t at = raw.size();
  raw.u8(2);
  expect_error(raw, StatusCode::kCorruption, {"'k'", "bool value 2"}, at);
}

TEST(GgufMalformed, DuplicateKey) {
  RawFile raw;
  raw.header(0, 3).kv_u32("a", 1).kv_u32("b", 2);
  const uint64_t at = raw.size();
  raw.kv_u32("a", 3);
  expect_error(raw, StatusCode::kCorruption,
               {"duplicate metadata key 'a'", "first at byte offset 24"}, at);
}

TEST(GgufMalformed, DuplicateTensorName) {
  RawFile raw;
  raw.header(2, 0).tensor_info("w", {4}, kTypeF32, 0);
  const uint64_t at = raw.size();
  raw.tensor_info("w", {4}, kTypeF32, 32).pad(32).zeros(64);
  expect_error(raw, StatusCode::kCorruption,
               {"duplicate tensor name 'w'", "first at byte offset 24"}, at);
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  RawFile raw;
  raw.header(0, 1).kv_u32("general.alignment", 48);
  expect_error(raw, StatusCode::kCorruption, {"general.alignment 48", "power of two"}, 24);
}

TEST(GgufMalformed, AlignmentZero) {
  RawFile raw;
  raw.header(0, 2).kv_u32("x", 1);
  const uint64_t at = raw.size();
  raw.kv_u32("general.alignment", 0);
  expect_error(raw, StatusCode::kCorruption, {"general.alignment 0"}, at);
}

TEST(GgufMalformed, AlignmentWrongType) {
  RawFile raw;
  raw.header(0, 1).str("general.alignment").u32(static_cast<uint32_t>(ValueType::UINT64)).u64(32);
  expect_error(raw, StatusCode::kCorruption, {"general.alignment has type uint64"}, 24);
}

TEST(GgufMalformed, TensorPastEndOfFile) {
  RawFile raw;
  raw.header(2, 0).tensor_info("a", {8}, kTypeF32, 0);
  const uint64_t at = raw.size();
  raw.tensor_info("b", {8}, kTypeF32, 32).pad(32).zeros(32 + 31);  // b needs 32 bytes at +32
  expect_error(raw, StatusCode::kCorruption, {"tensor 'b'", "ends past the end of the file"}, at);
}

TEST(GgufMalformed, TensorOffsetOverflows) {
  RawFile raw;
  raw.header(1, 0).tensor_info("a", {8}, kTypeF32, ~uint64_t{31}).pad(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "past the end"}, 24);
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(1).u64(4).u32(kTypeF32);
  const uint64_t at = raw.size();
  raw.u64(16).pad(32).zeros(64);
  expect_error(raw, StatusCode::kCorruption,
               {"tensor 'a' data offset 16 is not a multiple of the alignment 32"}, at);
}

TEST(GgufMalformed, MisalignedUnderCustomAlignment) {
  RawFile raw;
  raw.header(1, 1).kv_u32("general.alignment", 64).str("a").u32(1).u64(4).u32(kTypeF32);
  const uint64_t at = raw.size();
  raw.u64(32).pad(64).zeros(128);
  expect_error(raw, StatusCode::kCorruption, {"not a multiple of the alignment 64"}, at);
}

TEST(GgufMalformed, TooManyDims) {
  RawFile raw;
  raw.header(1, 0).str("a");
  const uint64_t at = raw.size();
  raw.u32(5);
  for (int i = 0; i < 5; ++i) raw.u64(1);
  raw.u32(kTypeF32).u64(0).pad(32).zeros(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a' has 5 dimensions"}, at);
}

TEST(GgufMalformed, ZeroDim) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(2);
  const uint64_t at = raw.size();
  raw.u64(4).u64(0).u32(kTypeF32).u64(0).pad(32).zeros(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "dimension 1 is 0"}, at);
}

TEST(GgufMalformed, NegativeDim) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(1);
  const uint64_t at = raw.size();
  raw.u64(~uint64_t{0}).u32(kTypeF32).u64(0).pad(32).zeros(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "dimension 0 is -1"}, at);
}

TEST(GgufMalformed, ElementCountOverflow) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(3);
  const uint64_t at = raw.size();
  raw.u64(1u << 31).u64(1u << 31).u64(4).u32(kTypeF32).u64(0).pad(32).zeros(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "element count overflows"}, at);
}

TEST(GgufMalformed, ByteSizeOverflow) {
  // 2^62 f64 elements fit int64 but take 2^65 bytes.
  RawFile raw;
  raw.header(1, 0).str("a").u32(1);
  const uint64_t at = raw.size();
  raw.u64(uint64_t{1} << 62).u32(28).u64(0).pad(32).zeros(32);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "data size overflows"}, at);
}

TEST(GgufMalformed, UnknownTensorType) {
  for (uint32_t id : {4u, 31u, 1000u}) {
    RawFile raw;
    raw.header(1, 0).str("a").u32(1).u64(4);
    const uint64_t at = raw.size();
    raw.u32(id).u64(0).pad(32).zeros(32);
    expect_error(raw, StatusCode::kNotSupported,
                 {"tensor 'a' has unknown ggml type id " + std::to_string(id)}, at);
  }
}

TEST(GgufMalformed, DimNotMultipleOfBlockSize) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(2);
  const uint64_t at = raw.size();
  raw.u64(33).u64(2).u32(kTypeQ4_0).u64(0).pad(32).zeros(128);
  expect_error(raw, StatusCode::kCorruption, {"tensor 'a'", "33", "q4_0", "block size"}, at);
}

TEST(GgufMalformed, TensorInfoTruncated) {
  RawFile raw;
  raw.header(1, 0).str("a").u32(2).u64(4);
  const uint64_t at = raw.size();
  raw.zeros(4);  // second dimension cut short (the count check passes: 24 bytes remain)
  expect_error(raw, StatusCode::kCorruption, {"truncated", "tensor dimension"}, at);
}

TEST(GgufMalformed, NoTensorsNeedsNoPadding) {
  // A metadata-only file may end right after its last key (ggml and gguf-py accept this).
  RawFile raw;
  raw.header(0, 1).kv_u32("a", 1);
  auto f = File::from_memory(raw.bytes());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->data_offset(), 64u);
}

}  // namespace
}  // namespace mnemo::gguf
