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
};

// Builds from the "normalizer" object of tokenizer.json (null gives nullptr). Throws Error naming
// an unsupported type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec);

}  // namespace tf
