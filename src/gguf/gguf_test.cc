// Tests for the GGUF reader and writer: writer -> reader round trips of every value type and of
// tensors, accessor errors, writer argument errors, and truncation of a Writer's output at every
// byte. Malformed files built byte by byte are tested in gguf_malformed_test.cc.
#include "mnemo/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace mnemo::gguf {

// Readable failure output for values.
void PrintTo(const Value& v, std::ostream* os) {
  *os << value_type_name(v.type) << ":";
  if (const auto* u = std::get_if<uint64_t>(&v.v)) *os << *u;
  if (const auto* s = std::get_if<int64_t>(&v.v)) *os << *s;
  if (const auto* d = std::get_if<double>(&v.v)) *os << *d;
  if (const auto* b = std::get_if<bool>(&v.v)) *os << (*b ? "true" : "false");
  if (const auto* str = std::get_if<std::string>(&v.v)) *os << '"' << *str << '"';
  if (const auto* a = std::get_if<Array>(&v.v)) {
    *os << "[" << value_type_name(a->elem_type) << ":";
    for (const Value& item : a->items) {
      PrintTo(item, os);
      *os << ",";
    }
    *os << "]";
  }
}

namespace {

std::vector<std::pair<std::string, Value>> sample_metadata() {
  using V = Value;
  std::vector<std::pair<std::string, Value>> kv = {
      {"general.architecture", V::str("llama")},
      {"t.u8", V::u8(255)},
      {"t.i8", V::i8(-128)},
      {"t.u16", V::u16(65535)},
      {"t.i16", V::i16(-32768)},
      {"t.u32", V::u32(4294967295u)},
      {"t.i32", V::i32(std::numeric_limits<int32_t>::min())},
      {"t.u64", V::u64(std::numeric_limits<uint64_t>::max())},
      {"t.i64", V::i64(std::numeric_limits<int64_t>::min())},
      {"t.f32", V::f32(-1.5e-7f)},
      {"t.f64", V::f64(3.141592653589793)},
      {"t.true", V::boolean(true)},
      {"t.false", V::boolean(false)},
      {"t.str", V::str("héllo \xE4\xB8\x96\xE7\x95\x8C")},
      {"t.empty_str", V::str("")},
      {"t.nul_str", V::str(std::string("a\0b", 3))},
      {"t.arr_u8", V::array(ValueType::UINT8, {V::u8(0), V::u8(7), V::u8(255)})},
      {"t.arr_i8", V::array(ValueType::INT8, {V::i8(-1), V::i8(127)})},
      {"t.arr_u16", V::array(ValueType::UINT16, {V::u16(1), V::u16(65535)})},
      {"t.arr_i16", V::array(ValueType::INT16, {V::i16(-2)})},
      {"t.arr_u32", V::array(ValueType::UINT32, {V::u32(1), V::u32(2), V::u32(3)})},
      {"t.arr_i32", V::array(ValueType::INT32, {V::i32(-5), V::i32(5)})},
      {"t.arr_u64", V::array(ValueType::UINT64, {V::u64(1ull << 63)})},
      {"t.arr_i64", V::array(ValueType::INT64, {V::i64(-(1ll << 62))})},
      {"t.arr_f32", V::array(ValueType::FLOAT32, {V::f32(0.5f), V::f32(-2.25f)})},
      {"t.arr_f64", V::array(ValueType::FLOAT64, {V::f64(1e300)})},
      {"t.arr_bool", V::array(ValueType::BOOL, {V::boolean(true), V::boolean(false)})},
      {"t.arr_str", V::array(ValueType::STRING, {V::str("a"), V::str(""), V::str("ccc")})},
      {"t.arr_empty", V::array(ValueType::INT32, {})},
      {"t.arr_nested",
       V::array(ValueType::ARRAY,
                {V::array(ValueType::INT32, {V::i32(1), V::i32(2)}), V::array(ValueType::INT32, {}),
                 V::array(ValueType::INT32, {V::i32(3)})})},
      {"t.arr_nested3",
       V::array(ValueType::ARRAY,
                {V::array(ValueType::ARRAY,
                          {V::array(ValueType::STRING, {V::str("x"), V::str("yy")})})})},
      {"llama.context_length", V::u32(2048)},
      {"llama.rope.freq_base", V::f32(10000.0f)},
  };
  return kv;
}

Writer sample_writer(uint64_t alignment = kDefaultAlignment) {
  Writer w(alignment);
  for (auto& [k, v] : sample_metadata()) EXPECT_TRUE(w.add(k, v).ok()) << k;
  return w;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Round trips.

TEST(GgufRoundTrip, EveryValueTypeIncludingNestedArrays) {
  const std::vector<uint8_t> bytes = sample_writer().serialize();
  auto f = File::from_memory(bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const auto expected = sample_metadata();
  ASSERT_EQ(f->metadata().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].first, expected[i].first);  // file order kept
    EXPECT_EQ(f->metadata()[i].second, expected[i].second) << expected[i].first;
    ASSERT_NE(f->find(expected[i].first), nullptr);
  }
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->find("general.alignment"), nullptr);  // default alignment is not written
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->file_size(), bytes.size());
}

TEST(GgufRoundTrip, EqualityDetectsDifferences) {
  // Guards the round-trip test against an operator== that always says yes.
  EXPECT_NE(Value::u8(1), Value::u16(1));
  EXPECT_NE(Value::u8(1), Value::u8(2));
  EXPECT_NE(Value::array(ValueType::INT32, {}), Value::array(ValueType::UINT32, {}));
  EXPECT_NE(Value::array(ValueType::INT32, {Value::i32(1)}),
            Value::array(ValueType::INT32, {Value::i32(2)}));
  EXPECT_EQ(Value::array(ValueType::STRING, {Value::str("a")}),
            Value::array(ValueType::STRING, {Value::str("a")}));
}

struct SampleTensor {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type;
  std::vector<uint8_t> data;
};

std::vector<SampleTensor> sample_tensors() {
  std::vector<SampleTensor> ts = {
      {"tok_embd.weight", {8, 3}, GgmlType::F32, {}},
      {"norm.weight", {5}, GgmlType::F16, {}},
      {"q4_0.weight", {64, 2}, GgmlType::Q4_0, {}},
      {"q8_0.weight", {32, 1, 2}, GgmlType::Q8_0, {}},
      {"q4_k.weight", {256, 2}, GgmlType::Q4_K, {}},
      {"ids", {3, 1, 1, 2}, GgmlType::I32, {}},
      {"scalar", {}, GgmlType::F32, {}},
  };
  uint32_t seed = 1;
  for (auto& t : ts) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    t.data = random_bytes(row_size(t.type, row) * (n / row), seed++);
  }
  return ts;
}

void check_tensors(const File& f, uint64_t alignment) {
  const auto expected = sample_tensors();
  ASSERT_EQ(f.tensors().size(), expected.size());
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(t.name, expected[i].name);
    EXPECT_EQ(t.dims, expected[i].dims);
    EXPECT_EQ(t.type, expected[i].type);
    EXPECT_EQ(t.offset % alignment, 0u);
    ASSERT_EQ(t.n_bytes, expected[i].data.size());
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(t.data, f.tensors()[0].data - f.tensors()[0].offset + t.offset);
    EXPECT_EQ(std::memcmp(t.data, expected[i].data.data(), t.n_bytes), 0);
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(f.tensors()[0].n_elements(), 24);
  EXPECT_EQ(f.tensors()[6].n_elements(), 1);  // 0-dimensional scalar
}

TEST(GgufRoundTrip, TensorsWithDefaultAndCustomAlignment) {
  for (uint64_t alignment : {uint64_t{32}, uint64_t{64}, uint64_t{1}, uint64_t{4096}}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    Writer w = sample_writer(alignment);
    for (const auto& t : sample_tensors()) {
      ASSERT_TRUE(w.add_tensor(t.name, t.dims, t.type, t.data).ok()) << t.name;
    }
    const std::vector<uint8_t> bytes = w.serialize();
    EXPECT_EQ(bytes.size() % alignment, 0u);  // the last tensor is padded too, as gguf-py does
    auto f = File::from_memory(bytes);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ(f->alignment(), alignment);
    if (alignment != 32) {
      ASSERT_NE(f->find("general.alignment"), nullptr);
      EXPECT_EQ(*f->find("general.alignment"), Value::u32(static_cast<uint32_t>(alignment)));
      EXPECT_EQ(f->metadata()[0].first, "general.alignment");
    }
    check_tensors(*f, alignment);
  }
}

TEST(GgufRoundTrip, AddTensorF32) {
  Writer w;
  const std::vector<float> x = {1.0f, -2.0f, 0.25f, 8.0f, 3.0f, 9.5f};
  ASSERT_TRUE(w.add_tensor_f32("x", {3, 2}, x).ok());
  EXPECT_EQ(w.add_tensor_f32("y", {4, 2}, x).code(), StatusCode::kInvalidArgument);
  const auto bytes = w.serialize();
  auto f = File::from_memory(bytes);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const TensorInfo* t = f->find_tensor("x");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, GgmlType::F32);
  EXPECT_EQ(std::memcmp(t->data, x.data(), 24), 0);
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/mnemo_gguf_test_" + std::to_string(getpid()) + "_" +
         name;
}

TEST(GgufRoundTrip, OpenFromPathAndMove) {
  Writer w = sample_writer(64);
  for (const auto& t : sample_tensors())
    ASSERT_TRUE(w.add_tensor(t.name, t.dims, t.type, t.data).ok());
  const std::string path = temp_path("open.gguf");
  ASSERT_TRUE(w.write(path).ok());
  {
    auto r = File::open(path);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    File f = std::move(r).value();
    File g = std::move(f);  // data pointers stay valid: the mapping does not move
    check_tensors(g, 64);
    EXPECT_EQ(g.get_string("general.architecture").value(), "llama");
    const std::vector<uint8_t> other = Writer().serialize();
    File h = File::from_memory(other).value();
    h = std::move(g);  // move assignment releases h's own state first
    check_tensors(h, 64);
  }
  std::remove(path.c_str());
}

// release_pages drops pages from memory, never contents: a mapped file reads the same after it
// (pages fault back in from the file), and a File made from memory is left untouched.
TEST(GgufRoundTrip, ReleasePagesKeepsContents) {
  Writer w = sample_writer(4096);
  for (const auto& t : sample_tensors())
    ASSERT_TRUE(w.add_tensor(t.name, t.dims, t.type, t.data).ok());
  const std::vector<uint8_t> bytes = w.serialize();
  const std::string path = temp_path("release.gguf");
  ASSERT_TRUE(w.write(path).ok());
  {
    File mapped = File::open(path).value();
    File in_memory = File::from_memory(bytes).value();
    for (const File* f : {&mapped, &in_memory}) {
      for (const TensorInfo& t : f->tensors()) f->release_pages(t.data, t.n_bytes);
      // The in-memory buffer whole (for the mapped file: a range outside its mapping) and an
      // empty range: no-ops.
      f->release_pages(bytes.data(), bytes.size());
      f->release_pages(nullptr, 0);
      check_tensors(*f, 4096);
    }
  }
  std::remove(path.c_str());
}

TEST(GgufRoundTrip, OpenErrors) {
  auto missing = File::open(temp_path("does_not_exist.gguf"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("does_not_exist.gguf"), std::string::npos);

  const std::string empty = temp_path("empty.gguf");
  std::FILE* fp = std::fopen(empty.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fclose(fp);
  auto r = File::open(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("empty.gguf"), std::string::npos);  // names the path
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
  std::remove(empty.c_str());

  auto dir = File::open("/");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kIOError);
}

TEST(GgufRoundTrip, WriteToBadPathIsIOError) {
  Writer w;
  const Status st = w.write("/nonexistent_dir_mnemo/x.gguf");
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_NE(st.message().find("/nonexistent_dir_mnemo/x.gguf"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Accessors.

class GgufAccessors : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = sample_writer().serialize();
    auto r = File::from_memory(bytes_);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    file_ = std::make_unique<File>(std::move(r).value());
  }
  static void expect_status(const Status& st, StatusCode code, std::vector<std::string> needles) {
    EXPECT_EQ(st.code(), code) << st.to_string();
    for (const auto& n : needles) {
      EXPECT_NE(st.message().find(n), std::string::npos)
          << "'" << st.message() << "' lacks '" << n << "'";
    }
  }
  std::vector<uint8_t> bytes_;
  std::unique_ptr<File> file_;
};

TEST_F(GgufAccessors, TypedValues) {
  const File& f = *file_;
  EXPECT_EQ(f.get_uint("t.u8").value(), 255u);
  EXPECT_EQ(f.get_uint("t.u64").value(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_uint("t.arr_u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.get_int("t.i8").value(), -128);
  EXPECT_EQ(f.get_int("t.i64").value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_int("t.u32").value(), 4294967295);
  EXPECT_EQ(f.get_uint("llama.context_length").value(), 2048u);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("t.f32").value()), -1.5e-7f);
  EXPECT_DOUBLE_EQ(f.get_float("t.f64").value(), 3.141592653589793);
  EXPECT_DOUBLE_EQ(f.get_float("t.u16").value(), 65535.0);  // integers widen to double
  EXPECT_TRUE(f.get_bool("t.true").value());
  EXPECT_FALSE(f.get_bool("t.false").value());
  EXPECT_EQ(f.get_string("t.str").value(), "héllo \xE4\xB8\x96\xE7\x95\x8C");
  EXPECT_EQ(f.get_string("t.nul_str").value().size(), 3u);
  const Array* a = f.get_array("t.arr_str").value();
  ASSERT_EQ(a->items.size(), 3u);
  EXPECT_EQ(a->elem_type, ValueType::STRING);
  EXPECT_EQ(*a->items[2].as_string(), "ccc");
  EXPECT_EQ(f.architecture(), "llama");
  EXPECT_EQ(f.arch_key("context_length"), "llama.context_length");
  EXPECT_EQ(f.get_arch_uint("context_length").value(), 2048u);
  EXPECT_DOUBLE_EQ(f.get_arch_float("rope.freq_base").value(), 10000.0);
}

TEST_F(GgufAccessors, MissingKeyIsNotFoundNamingIt) {
  const File& f = *file_;
  expect_status(f.get_uint("no.such").status(), StatusCode::kNotFound, {"'no.such'", "not found"});
  expect_status(f.get_int("no.such").status(), StatusCode::kNotFound, {"'no.such'"});
  expect_status(f.get_float("no.such").status(), StatusCode::kNotFound, {"'no.such'"});
  expect_status(f.get_bool("no.such").status(), StatusCode::kNotFound, {"'no.such'"});
  expect_status(f.get_string("no.such").status(), StatusCode::kNotFound, {"'no.such'"});
  expect_status(f.get_array("no.such").status(), StatusCode::kNotFound, {"'no.such'"});
  expect_status(f.get_arch_uint("block_count").status(), StatusCode::kNotFound,
                {"'llama.block_count'"});
  expect_status(f.get_arch_float("rope.scale").status(), StatusCode::kNotFound,
                {"'llama.rope.scale'"});
  EXPECT_EQ(f.find("no.such"), nullptr);
}

TEST_F(GgufAccessors, WrongTypeIsInvalidArgumentNamingKeyAndTypes) {
  const File& f = *file_;
  expect_status(f.get_uint("t.str").status(), StatusCode::kInvalidArgument,
                {"'t.str'", "string", "integer"});
  expect_status(f.get_int("t.f32").status(), StatusCode::kInvalidArgument,
                {"'t.f32'", "float32", "integer"});
  expect_status(f.get_float("t.true").status(), StatusCode::kInvalidArgument,
                {"'t.true'", "bool", "float"});
  expect_status(f.get_bool("t.u8").status(), StatusCode::kInvalidArgument,
                {"'t.u8'", "uint8", "expected bool"});
  expect_status(f.get_string("t.arr_str").status(), StatusCode::kInvalidArgument,
                {"'t.arr_str'", "array", "expected string"});
  expect_status(f.get_array("t.str").status(), StatusCode::kInvalidArgument,
                {"'t.str'", "string", "expected array"});
  expect_status(f.get_arch_uint("rope.freq_base").status(), StatusCode::kInvalidArgument,
                {"'llama.rope.freq_base'", "float32"});
  // Integers that do not fit the requested signedness.
  expect_status(f.get_uint("t.i8").status(), StatusCode::kInvalidArgument, {"'t.i8'", "-128"});
  expect_status(f.get_int("t.u64").status(), StatusCode::kInvalidArgument,
                {"'t.u64'", "18446744073709551615", "int64"});
}

TEST(GgufAccessorsNoArch, ArchAccessorsNeedArchitecture) {
  Writer w;
  ASSERT_TRUE(w.add("context_length", Value::u32(5)).ok());
  const auto bytes = w.serialize();
  auto f = File::from_memory(bytes);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->architecture(), "");
  const Status st = f->get_arch_uint("context_length").status();
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("general.architecture"), std::string::npos);
  EXPECT_EQ(f->get_arch_float("context_length").status().code(), StatusCode::kNotFound);
}

TEST(GgufValue, Views) {
  EXPECT_TRUE(Value::u8(1).is_integer());
  EXPECT_TRUE(Value::i64(1).is_integer());
  EXPECT_FALSE(Value::f32(1).is_integer());
  EXPECT_FALSE(Value::boolean(true).is_integer());
  EXPECT_TRUE(Value::f64(1).is_float());
  EXPECT_FALSE(Value::u32(1).is_float());
  EXPECT_EQ(Value::i8(-3).as_int(), -3);
  EXPECT_EQ(Value::i8(-3).as_uint(), std::nullopt);
  EXPECT_EQ(Value::u64(~0ull).as_int(), std::nullopt);
  EXPECT_EQ(Value::u64(~0ull).as_uint(), ~0ull);
  EXPECT_EQ(Value::f32(2.5f).as_double(), 2.5);
  EXPECT_EQ(Value::f32(2.5f).as_int(), std::nullopt);
  EXPECT_EQ(Value::str("x").as_double(), std::nullopt);
  EXPECT_EQ(Value::str("x").as_bool(), std::nullopt);
  EXPECT_EQ(Value::boolean(false).as_bool(), false);
  EXPECT_EQ(Value::u8(1).as_string(), nullptr);
  EXPECT_EQ(Value::u8(1).as_array(), nullptr);
  EXPECT_NE(Value::array(ValueType::UINT8, {}).as_array(), nullptr);
  EXPECT_EQ(value_type_name(ValueType::FLOAT32), "float32");
  EXPECT_EQ(value_type_name(ValueType::ARRAY), "array");
  EXPECT_EQ(value_type_name(static_cast<ValueType>(99)), "unknown");
}

// ---------------------------------------------------------------------------------------------
// Writer argument errors.

TEST(GgufWriter, MetadataErrors) {
  Writer w(64);
  ASSERT_TRUE(w.add("a", Value::u8(1)).ok());
  EXPECT_EQ(w.add("a", Value::u8(2)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("", Value::u8(2)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("general.alignment", Value::u32(64)).code(), StatusCode::kInvalidArgument);
  // Payload out of its declared range or of the wrong alternative.
  EXPECT_EQ(w.add("b", Value{ValueType::UINT8, uint64_t{256}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("b", Value{ValueType::INT16, int64_t{40000}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("b", Value{ValueType::UINT32, int64_t{1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("b", Value{ValueType::STRING, uint64_t{1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add("b", Value{static_cast<ValueType>(13), uint64_t{1}}).code(),
            StatusCode::kInvalidArgument);
  // Array items must match the element type.
  const Status mixed = w.add("b", Value::array(ValueType::INT32, {Value::i32(1), Value::u32(2)}));
  EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.message().find("'b'[1]"), std::string::npos) << mixed.message();
  // Nesting: kMaxArrayDepth levels are fine, one more is not.
  Value v = Value::array(ValueType::UINT8, {});
  for (int i = 1; i < kMaxArrayDepth; ++i) v = Value::array(ValueType::ARRAY, {v});
  EXPECT_TRUE(w.add("deep", v).ok());
  v = Value::array(ValueType::ARRAY, {v});
  EXPECT_EQ(w.add("deeper", v).code(), StatusCode::kInvalidArgument);

  // general.alignment agreeing with the constructor is accepted once.
  Writer w32;
  EXPECT_EQ(w32.add("general.alignment", Value::u32(64)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w32.add("general.alignment", Value::u64(32)).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(w32.add("general.alignment", Value::u32(32)).ok());
}

TEST(GgufWriter, TensorErrors) {
  Writer w;
  const std::vector<uint8_t> d4(4), d18(18), d16(16);
  ASSERT_TRUE(w.add_tensor("t", {1}, GgmlType::F32, d4).ok());
  EXPECT_EQ(w.add_tensor("t", {1}, GgmlType::F32, d4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("", {1}, GgmlType::F32, d4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor(std::string(64, 'n'), {1}, GgmlType::F32, d4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.add_tensor(std::string(63, 'n'), {1}, GgmlType::F32, d4).ok());
  EXPECT_EQ(w.add_tensor("u", {2}, GgmlType::F32, d4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {1, 1, 1, 1, 1}, GgmlType::F32, d4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {0}, GgmlType::F32, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {-1}, GgmlType::F32, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {16}, GgmlType::Q4_0, d18).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {1}, static_cast<GgmlType>(4), d4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("u", {int64_t{1} << 32, int64_t{1} << 32}, GgmlType::F32, d4).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(w.add_tensor("u", {32}, GgmlType::Q4_0, d18).ok());
  const Status st = w.add_tensor("v", {32}, GgmlType::Q4_0, d16);
  EXPECT_NE(st.message().find("needs 18 bytes, got 16"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------------------------------------
// Malformed files: every prefix of a valid file is rejected.

TEST(GgufMalformed, TruncatedAtEveryByte) {
  Writer w = sample_writer(64);
  for (const auto& t : sample_tensors())
    ASSERT_TRUE(w.add_tensor(t.name, t.dims, t.type, t.data).ok());
  const std::vector<uint8_t> bytes = w.serialize();
  auto full = File::from_memory(bytes);
  ASSERT_TRUE(full.ok());
  const TensorInfo& last = full->tensors().back();
  const uint64_t data_end = full->data_offset() + last.offset + last.n_bytes;
  for (uint64_t n = 0; n < data_end; ++n) {
    auto r = File::from_memory(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().to_string();
    EXPECT_NE(r.status().message().find("byte offset"), std::string::npos)
        << r.status().to_string();
  }
  // Only the trailing padding may go.
  EXPECT_TRUE(File::from_memory(std::span<const uint8_t>(bytes.data(), data_end)).ok());
}

}  // namespace
}  // namespace mnemo::gguf
