// Test tool: loads a tokenizer the way tokenflow does and, for each line of stdin (a JSON
// string), prints one line: the ids as a JSON array (default), or with --roundtrip the decoded
// text of those ids as a JSON string, or with --stream the concatenation of the incremental
// detokenizer's pieces as a JSON string.
//
//   tokenize_lines PATH [--vocab N] [--no-special] [--roundtrip|--stream]

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer_loader.h"

int main(int argc, char** argv) {
  try {
    if (argc < 2)
      tf::fail("usage: tokenize_lines PATH [--vocab N] [--no-special] [--roundtrip|--stream]");
    std::string path = argv[1];
    int64_t vocab = 0;
    bool special = true, roundtrip = false, stream = false;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--vocab" && i + 1 < argc)
        vocab = std::stoll(argv[++i]);
      else if (a == "--no-special")
        special = false;
      else if (a == "--roundtrip")
        roundtrip = true;
      else if (a == "--stream")
        stream = true;
      else
        tf::fail("unknown option {}", a);
    }
    tf::LoadedTokenizer loaded = tf::load_tokenizer(path, vocab);
    if (!loaded.tokenizer) tf::fail("no tokenizer in '{}'", path);
    const tf::Tokenizer& tok = *loaded.tokenizer;
    std::string line;
    while (std::getline(std::cin, line)) {
      const std::string text = nlohmann::json::parse(line).get<std::string>();
      const std::vector<int32_t> ids = tok.encode(text, special);
      nlohmann::json out;
      if (roundtrip) {
        out = tok.decode(ids, /*skip_special_tokens=*/true);
      } else if (stream) {
        tf::IncrementalDetokenizer d(tok, {});
        std::string s;
        for (int32_t id : ids) s += d.push(id);
        s += d.flush();
        out = s;
      } else {
        out = ids;
      }
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
