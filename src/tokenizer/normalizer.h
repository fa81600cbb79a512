#pragma once
// Hugging Face tokenizers' normalizers: text -> text before pre-tokenization.

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace tf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
  // True if the output is never shorter (in bytes) than the input: then a bound on the tokens
  // of the normalized text bounds those of the input (Tokenizer::max_bytes_per_token).
  virtual bool never_shortens() const { return false; }
};

// Builds from the "normalizer" object of tokenizer.json (null gives nullptr). Throws Error naming
// an unsupported type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec);

}  // namespace tf
