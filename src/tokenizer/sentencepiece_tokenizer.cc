#include "tokenizer/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/mapped_file.h"

namespace tf {
namespace {

// The shim's functions, loaded once per process.
struct Shim {
  void* (*load)(const char*, size_t, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*info)(void*, int) = nullptr;
  int (*flags)(void*, int) = nullptr;
  size_t (*piece)(void*, int, char*, size_t) = nullptr;
  long (*encode)(void*, const char*, size_t, int*, size_t, char*, size_t) = nullptr;
  std::string error;
};

std::string exe_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

const Shim& shim() {
  static const Shim s = [] {
    Shim out;
    std::vector<std::string> tried;
    if (const char* env = std::getenv("TOKENFLOW_SPM_SHIM")) tried.push_back(env);
    if (const std::string dir = exe_dir(); !dir.empty())
      tried.push_back(dir + "/libtf_spm_shim.so");
#ifdef TF_SPM_SHIM_BUILD_PATH
    tried.push_back(TF_SPM_SHIM_BUILD_PATH);
#endif
    void* lib = nullptr;
    std::string why;
    for (const auto& path : tried) {
#ifdef TF_SPM_SHIM_DLMOPEN
      // Sanitizer builds: ASan refuses RTLD_DEEPBIND; a namespace of its own isolates as well.
      lib = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
      if (lib) break;
      const char* e = dlerror();
      why += fmt::format("\n  {}: {}", path, e ? e : "not loadable");
    }
    if (!lib) {
      out.error =
          "SentencePiece .model files need libtf_spm_shim.so beside the tokenflow binary:" + why;
      return out;
    }
    out.load = reinterpret_cast<decltype(out.load)>(dlsym(lib, "tfspm_load"));
    out.free = reinterpret_cast<decltype(out.free)>(dlsym(lib, "tfspm_free"));
    out.info = reinterpret_cast<decltype(out.info)>(dlsym(lib, "tfspm_info"));
    out.flags = reinterpret_cast<decltype(out.flags)>(dlsym(lib, "tfspm_flags"));
    out.piece = reinterpret_cast<decltype(out.piece)>(dlsym(lib, "tfspm_piece"));
    out.encode = reinterpret_cast<decltype(out.encode)>(dlsym(lib, "tfspm_encode"));
    if (!out.load || !out.free || !out.info || !out.flags || !out.piece || !out.encode)
      out.error = "libtf_spm_shim.so lacks a function: rebuild tokenflow";
    return out;
  }();
  return s;
}

}  // namespace

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (handle_) shim().free(handle_);
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path) {
  return from_bytes(read_file(path), "'" + path + "'");
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_bytes(
    const std::string& bytes, const std::string& source) {
  const Shim& s = shim();
  if (!s.error.empty()) fail("{}: {}", source, s.error);
  auto tok = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  char err[512] = {0};
  tok->handle_ = s.load(bytes.data(), bytes.size(), err, sizeof err);
  if (!tok->handle_) fail("{}: not a SentencePiece model: {}", source, err);
  const int n = s.info(tok->handle_, 0);
  if (n <= 0) fail("{}: SentencePiece model has no pieces", source);
  tok->bos_id_ = s.info(tok->handle_, 1);
  tok->eos_id_ = s.info(tok->handle_, 2);
  tok->unk_id_ = s.info(tok->handle_, 3);
  tok->pieces_.resize(static_cast<size_t>(n));
  tok->flags_.resize(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    std::string& p = tok->pieces_[static_cast<size_t>(id)];
    p.resize(64);
    const size_t len = s.piece(tok->handle_, id, p.data(), p.size());
    p.resize(len);
    if (len > 64) s.piece(tok->handle_, id, p.data(), p.size());
    tok->flags_[static_cast<size_t>(id)] = static_cast<uint8_t>(s.flags(tok->handle_, id));
    tok->piece_ids_.emplace(p, id);
  }
  return tok;
}

int64_t SentencePieceTokenizer::vocab_size() const {
  return std::max(static_cast<int64_t>(pieces_.size()), added_.id_limit());
}

void SentencePieceTokenizer::set_added_tokens(std::vector<AddedToken> tokens,
                                              const std::string& source) {
  added_ = AddedTokens(std::move(tokens), source);
}

void SentencePieceTokenizer::encode_piece(std::string_view text, std::vector<int32_t>& out) const {
  const Shim& s = shim();
  std::vector<int> ids(text.size() + 16);
  char err[512] = {0};
  long n = s.encode(handle_, text.data(), text.size(), ids.data(), ids.size(), err, sizeof err);
  if (n > static_cast<long>(ids.size())) {
    ids.resize(static_cast<size_t>(n));
    n = s.encode(handle_, text.data(), text.size(), ids.data(), ids.size(), err, sizeof err);
  }
  if (n < 0) fail("SentencePiece could not encode the text: {}", err);
  out.insert(out.end(), ids.begin(), ids.begin() + n);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text,
                                                    bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special_tokens && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  added_.split(
      text, [&](std::string_view segment, bool) { encode_piece(segment, out); }, out);
  if (add_special_tokens && add_eos_ && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

std::string SentencePieceTokenizer::decode_bytes(std::span<const int32_t> ids,
                                                 bool skip_special_tokens) const {
  // Decode piece by piece ourselves: the library turns byte pieces of an incomplete character
  // into U+FFFD, which would break streaming of multi-byte characters.
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (const AddedToken* t = added_.by_id(id)) {
      if (!(skip_special_tokens && t->special)) out += t->content;
      first = false;
      continue;
    }
    if (id < 0 || id >= static_cast<int64_t>(pieces_.size())) continue;
    const uint8_t f = flags_[static_cast<size_t>(id)];
    if ((f & 1) || (skip_special_tokens && is_special(id))) continue;
    if (f & 2) {
      const std::string& p = pieces_[static_cast<size_t>(id)];  // "<0xNN>"
      out += static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16));
      first = false;
      continue;
    }
    const std::string p =
        (f & 4) ? std::string(" \xE2\x81\x87 ") : pieces_[static_cast<size_t>(id)];
    std::string text;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 marks a space
        text += ' ';
        i += 3;
      } else {
        text += p[i++];
      }
    }
    // SentencePiece drops the dummy-prefix space of the first piece it decodes.
    if (first && !text.empty() && text[0] == ' ') text.erase(0, 1);
    out += text;
    first = false;
  }
  return out;
}

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  if (const AddedToken* t = added_.by_id(id)) return t->content;
  if (id < 0 || id >= static_cast<int64_t>(pieces_.size())) return "";
  return pieces_[static_cast<size_t>(id)];
}

std::optional<int32_t> SentencePieceTokenizer::piece_to_id(std::string_view piece) const {
  if (auto id = added_.id_of(piece)) return id;
  auto it = piece_ids_.find(std::string(piece));
  if (it == piece_ids_.end()) return std::nullopt;
  return it->second;
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  if (const AddedToken* t = added_.by_id(id)) return t->special;
  return id >= 0 && id < static_cast<int64_t>(pieces_.size()) &&
         (flags_[static_cast<size_t>(id)] & 5) != 0;
}

}  // namespace tf
