#pragma once
// Helpers shared by the model tests: temp dirs, writing bytes, building safetensors files.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf::testing {

inline std::string shared_dir() {
  return TF_SHARED_DIR;
}
inline std::string stories_bin() {
  return shared_dir() + "/models/stories260K/stories260K.bin";
}
inline std::string stories_tok() {
  return shared_dir() + "/models/stories260K/tok512.bin";
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("tf_test_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file: 8-byte length, the given header JSON (as text), then `data`.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// A random-weight Llama of tiny shape in a Hugging Face directory (for tests that need a small
// vocabulary, e.g. exhaustive search).
inline void write_tiny_llama(const std::string& dir, int vocab, uint32_t seed) {
  const int d = 16, layers = 1, heads = 2, kv_heads = 1, ffn = 24, hd = d / heads;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      const float v = ones ? 1.0f : normal(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  };
  add("model.embed_tokens.weight", {vocab, d});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d}, true);
    add(p + "self_attn.q_proj.weight", {heads * hd, d});
    add(p + "self_attn.k_proj.weight", {kv_heads * hd, d});
    add(p + "self_attn.v_proj.weight", {kv_heads * hd, d});
    add(p + "self_attn.o_proj.weight", {d, heads * hd});
    add(p + "post_attention_layernorm.weight", {d}, true);
    add(p + "mlp.gate_proj.weight", {ffn, d});
    add(p + "mlp.up_proj.weight", {ffn, d});
    add(p + "mlp.down_proj.weight", {d, ffn});
  }
  add("model.norm.weight", {d}, true);
  add("lm_head.weight", {vocab, d});
  write_bytes(dir + "/model.safetensors", safetensors_bytes(header.dump(), data));
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"hidden_size", d},
                                 {"intermediate_size", ffn},
                                 {"num_hidden_layers", layers},
                                 {"num_attention_heads", heads},
                                 {"num_key_value_heads", kv_heads},
                                 {"vocab_size", vocab},
                                 {"max_position_embeddings", 64},
                                 {"rms_norm_eps", 1e-5},
                                 {"tie_word_embeddings", false}};
  write_bytes(dir + "/config.json", config.dump());
}

}  // namespace tf::testing
