// libtf_spm_shim.so: the SentencePiece library behind a C interface, loaded by
// sentencepiece_tokenizer.cc with dlopen(RTLD_DEEPBIND). Debian's libsentencepiece carries its own
// copy of protobuf-lite 3.14 and exports its symbols; in a process that also uses the system's
// libprotobuf (the model config, gRPC) the two would bind to each other's functions and crash.
// Loaded this way, the library binds to its own copy and nothing else sees it. Nothing crosses
// this interface but C types and caller-owned buffers.

#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(const std::string& message, char* err, size_t err_cap) {
  if (err == nullptr || err_cap == 0) return;
  const size_t n = std::min(message.size(), err_cap - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

sentencepiece::SentencePieceProcessor* sp(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* tfspm_load(const char* bytes, size_t n, char* err,
                                                        size_t err_cap) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto status = p->LoadFromSerializedProto(std::string_view(bytes, n));
  if (!status.ok()) {
    set_error(status.ToString(), err, err_cap);
    delete p;
    return nullptr;
  }
  return p;
}

__attribute__((visibility("default"))) void tfspm_free(void* h) {
  delete sp(h);
}

// Ids: 0 piece count, 1 bos, 2 eos, 3 unk.
__attribute__((visibility("default"))) int tfspm_info(void* h, int what) {
  switch (what) {
    case 0:
      return sp(h)->GetPieceSize();
    case 1:
      return sp(h)->bos_id();
    case 2:
      return sp(h)->eos_id();
    default:
      return sp(h)->unk_id();
  }
}

// Bit 0 control, bit 1 byte, bit 2 unknown.
__attribute__((visibility("default"))) int tfspm_flags(void* h, int id) {
  return (sp(h)->IsControl(id) ? 1 : 0) | (sp(h)->IsByte(id) ? 2 : 0) |
         (sp(h)->IsUnknown(id) ? 4 : 0);
}

// Copies up to cap bytes of the piece; returns its full length.
__attribute__((visibility("default"))) size_t tfspm_piece(void* h, int id, char* buf, size_t cap) {
  const std::string& p = sp(h)->IdToPiece(id);
  std::memcpy(buf, p.data(), std::min(cap, p.size()));
  return p.size();
}

// Encodes text; writes up to cap ids and returns how many there are (call again with more room
// if that is above cap), or -1 with err set.
__attribute__((visibility("default"))) long tfspm_encode(void* h, const char* text, size_t n,
                                                         int* ids, size_t cap, char* err,
                                                         size_t err_cap) {
  std::vector<int> out;
  const auto status = sp(h)->Encode(std::string_view(text, n), &out);
  if (!status.ok()) {
    set_error(status.ToString(), err, err_cap);
    return -1;
  }
  std::memcpy(ids, out.data(), std::min(cap, out.size()) * sizeof(int));
  return static_cast<long>(out.size());
}

}  // extern "C"
