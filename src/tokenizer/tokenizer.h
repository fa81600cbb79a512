#pragma once
// What the rest of the system needs from a tokenizer: text to ids, ids to bytes, special ids.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1: none
  virtual int32_t eos_id() const = 0;  // -1: none
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // The bytes token `id` contributes to the output when it follows `prev` (-1 at the start).
  // May be a partial UTF-8 sequence; StreamDecoder assembles those.
  virtual std::string decode_token(int32_t prev, int32_t id) const = 0;

  std::string decode(const std::vector<int32_t>& ids) const;
};

// Turns a stream of token bytes into text that never splits a UTF-8 character: bytes of an
// incomplete character are held back until the rest arrives. Invalid bytes become U+FFFD.
class StreamDecoder {
 public:
  // Appends bytes; returns the text that is complete now.
  std::string push(std::string_view bytes);
  // Whatever is still held back, with incomplete characters as U+FFFD.
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace tf
