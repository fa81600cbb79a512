#pragma once
// What the rest of the system needs from a tokenizer: text to ids, ids to text, special ids, and
// decoding a growing sequence one token at a time for streaming.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // One past the largest id the tokenizer can produce or decode.
  virtual int64_t vocab_size() const = 0;
  // add_special_tokens: what the tokenizer adds around a text (BOS for Llama, nothing for GPT-2).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Two texts as one input (a cross-encoder's query and document): ids and each id's token type,
  // as the tokenizer's post-processor joins a pair. Without one: the first text's ids with its
  // special tokens (type 0), then the second's without (type 1).
  virtual void encode_pair(std::string_view a, std::string_view b, std::vector<int32_t>& ids,
                           std::vector<int32_t>& type_ids) const;
  // The bytes of the decoded ids, exactly: may hold partial or invalid UTF-8 (byte tokens).
  virtual std::string decode_bytes(std::span<const int32_t> ids,
                                   bool skip_special_tokens) const = 0;
  // The token's string in the vocabulary ("Ġthe", "▁the", "<0x0A>"); empty for an unknown id.
  virtual std::string id_to_piece(int32_t id) const = 0;
  virtual std::optional<int32_t> piece_to_id(std::string_view piece) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // Every id encode() returns stands for at most this many bytes of the text it was given, so a
  // text of B bytes encodes to at least ceil(B / max_bytes_per_token()) ids: a caller can refuse
  // a text too long for a context before encoding it. 0 where the tokenizer cannot promise a
  // bound (a normalizer or pre-tokenizer that drops text, runs of unknowns fused into one id).
  virtual size_t max_bytes_per_token() const { return 0; }

  int32_t bos_id() const { return bos_id_; }  // -1: none
  int32_t eos_id() const { return eos_id_; }  // -1: none
  void set_bos_id(int32_t id) { bos_id_ = id; }
  void set_eos_id(int32_t id) { eos_id_ = id; }

  // The fewest ids encode(text, false) can return for a text of that many bytes (0: unknown).
  size_t min_tokens_for_bytes(size_t bytes) const {
    const size_t per = max_bytes_per_token();
    return per == 0 ? 0 : (bytes + per - 1) / per;
  }

  // Valid UTF-8 text (invalid bytes become U+FFFD).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // Every token's bytes as it adds them after other text (a SentencePiece piece's leading space
  // kept, which decoding a piece alone drops): what constrained decoding matches. Special tokens
  // get no bytes.
  std::vector<std::string> vocabulary_bytes() const;

 protected:
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

// Turns a stream of bytes into text that never splits a UTF-8 character: bytes of an
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

// Decodes a growing sequence token by token so that the concatenated pieces equal decoding the
// whole sequence at once: each step decodes a short window that keeps a few earlier tokens as
// context (SentencePiece drops the leading space of a decode's first token; byte-level tokens
// complete each other's characters) and emits only what is new and complete.
class IncrementalDetokenizer {
 public:
  // `context` are ids already shown to the user (the prompt); they are not emitted.
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> context,
                         bool skip_special_tokens = true);
  // Adds one id; returns the new text (possibly empty while a character is incomplete).
  std::string push(int32_t id);
  // Text still held back at the end of the sequence, with incomplete characters as U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // start of the decode window
  size_t read_offset_ = 0;    // ids before this are emitted
};

}  // namespace tf
