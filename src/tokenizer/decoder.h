#pragma once
// Hugging Face tokenizers' decoders: token strings -> text. They produce raw bytes (a byte-level
// or byte-fallback token may carry half a UTF-8 character); callers sanitize or hold back.

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the list of token strings in place (the "decode chain").
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// Builds from the "decoder" object of tokenizer.json (null gives nullptr).
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec);
std::unique_ptr<Decoder> make_byte_level_decoder();

}  // namespace tf
