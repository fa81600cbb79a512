#include "tokenizer/tokenizer_loader.h"

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace tf {

std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, int64_t vocab_size,
                                              const std::string& explicit_path) {
  namespace fs = std::filesystem;
  if (!explicit_path.empty()) return Llama2cTokenizer::load(explicit_path, vocab_size);
  std::error_code ec;
  const fs::path dir =
      fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  const fs::path named = (dir.empty() ? fs::path(".") : dir) / "tokenizer.bin";
  if (fs::exists(named, ec)) return Llama2cTokenizer::load(named.string(), vocab_size);
  std::vector<fs::path> candidates;
  for (const auto& entry : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tok", 0) == 0 && entry.path().extension() == ".bin")
      candidates.push_back(entry.path());
  }
  if (candidates.size() == 1) return Llama2cTokenizer::load(candidates[0].string(), vocab_size);
  if (candidates.size() > 1) {
    fail("several tokenizer files beside '{}'; choose one with --tokenizer", model_path);
  }
  return nullptr;
}

}  // namespace tf
