#include "tokenizer/gguf_vocab.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/gguf.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace tf {

LoadedTokenizer load_gguf_tokenizer(const GgufFile& f, const std::string& path) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "llama") {
    fail(ErrorKind::kUnsupported, "'{}': tokenizer.ggml.model '{}' is not supported yet (llama is)",
         path, model);
  }
  std::vector<std::string> pieces = f.get_strings("tokenizer.ggml.tokens");
  std::vector<double> scores = f.get_numbers("tokenizer.ggml.scores");
  if (scores.size() != pieces.size())
    fail("'{}': tokenizer.ggml.scores has {} entries for {} tokens", path, scores.size(),
         pieces.size());
  const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id", 1);
  const uint64_t eos = f.get_uint("tokenizer.ggml.eos_token_id", 2);
  if (bos != 1 || eos != 2) {
    fail(ErrorKind::kUnsupported,
         "'{}': a llama vocabulary with BOS {} and EOS {} is not supported yet (1 and 2 are)", path,
         bos, eos);
  }
  LoadedTokenizer out;
  out.bos_token = pieces.size() > 1 ? pieces[1] : "";
  out.eos_token = pieces.size() > 2 ? pieces[2] : "";
  // SentencePiece writes a space as U+2581; the llama2.c tokenizer holds plain spaces.
  static const std::string kSpace = "\xe2\x96\x81";
  for (std::string& p : pieces) {
    if (p.find(kSpace) == std::string::npos) continue;
    std::string plain;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, kSpace.size(), kSpace) == 0) {
        plain += ' ';
        i += kSpace.size();
      } else {
        plain += p[i++];
      }
    }
    p = std::move(plain);
  }
  std::vector<float> fscores(scores.begin(), scores.end());
  out.tokenizer = Llama2cTokenizer::from_pieces(std::move(pieces), std::move(fscores), path);
  out.source = path;
  out.chat_template = f.get_string("tokenizer.chat_template", "");
  out.stop_ids = {static_cast<int32_t>(eos)};
  return out;
}

LoadedTokenizer load_gguf_tokenizer(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  return load_gguf_tokenizer(parse_gguf(file.data(), file.size(), path), path);
}

}  // namespace tf
