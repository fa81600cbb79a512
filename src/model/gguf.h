#pragma once
// GGUF, the file format of llama.cpp, Ollama and LM Studio: a header ("GGUF", version 2 or 3,
// tensor and metadata counts), typed key/value metadata (scalars, strings and arrays, arrays of
// arrays included), one info per tensor (name, dimensions, ggml type, offset), then the tensor
// data, each tensor at a multiple of general.alignment (32 by default) from the data section's
// start. Everything is little-endian.
//
// parse_gguf checks every count, length and offset against the bytes before it allocates for
// it, so a hostile file (counts past the end, giant strings or arrays, overlapping, unaligned or
// out-of-bounds tensors) is one Error naming the key or tensor, never a big allocation.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

// ggml's tensor types, with their numbers in the file.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeInfo {
  const char* name;    // as llama.cpp names it: "Q4_K", "F16", ...
  int64_t block_size;  // values per block
  int64_t type_size;   // bytes per block
};
// The type's layout; nullopt for a number ggml does not (or no longer) define.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);

// The value types of metadata.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_type_name(GgufType type);

// One metadata value: a scalar (integers in i for signed types, u for unsigned ones and bool; f
// for floats), a string, or an array of count elements of item_type. An array keeps its
// numbers as their bytes (no more memory than the file), its strings as strings, and its
// arrays as values.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  GgufType item_type = GgufType::kUint8;
  uint64_t count = 0;
  std::vector<uint8_t> raw;          // arrays of numbers or bools
  std::vector<std::string> strings;  // arrays of strings
  std::vector<GgufValue> arrays;     // arrays of arrays

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  // Element k of an array as a value of its own.
  GgufValue item(uint64_t k) const;
  // The value as text, arrays shortened to their first max_items elements ("[1, 2, ...] (512
  // items)"), strings quoted.
  std::string to_string(size_t max_items = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml's order: ne[0] is the innermost (a row's length)
  GgmlType type;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;   // the data's size
  int64_t numel() const;
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;                                 // file offset of the data section
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<GgufTensorInfo> tensors;                      // in file order

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* tensor(std::string_view name) const;
  // Typed reads of metadata, each an Error naming the key when it is absent (the ones without
  // a default) or of another type. get_uint accepts any integer type that fits; get_float any
  // number.
  uint64_t get_uint(std::string_view key) const;
  uint64_t get_uint(std::string_view key, uint64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  // An array of strings (tokenizer.ggml.tokens, .merges), of numbers (scores, token types).
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<double> get_numbers(std::string_view key) const;

 private:
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  friend GgufFile parse_gguf(const uint8_t* data, size_t size, const std::string& path);
};

// Parses and validates a whole file held in memory (mapped). `path` names the file in errors.
GgufFile parse_gguf(const uint8_t* data, size_t size, const std::string& path);

// Whether the bytes start with GGUF's magic.
bool is_gguf(const uint8_t* data, size_t size);

}  // namespace tf
