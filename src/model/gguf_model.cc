#include "model/gguf_model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include <sys/mman.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/ggml_quants.h"
#include "model/gguf.h"
#include "model/weight_store.h"

namespace tf {
namespace {

// GGUF's names of a Llama-family block's tensors, and the Hugging Face names the model reads.
const std::pair<const char*, const char*> kLlamaBlock[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    // Mixtures of experts: the router, the experts stacked [E, rows, cols], the shared expert.
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"ffn_gate_exps.weight", "mlp.experts.gate_proj"},
    {"ffn_up_exps.weight", "mlp.experts.up_proj"},
    {"ffn_down_exps.weight", "mlp.experts.down_proj"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
};

// GPT-2's (llama.cpp writes the Conv1D matrices transposed, as [out, in] like every other).
const std::pair<const char*, const char*> kGpt2Block[] = {
    {"attn_norm.weight", "ln_1.weight"},          {"attn_norm.bias", "ln_1.bias"},
    {"attn_qkv.weight", "attn.c_attn.weight"},    {"attn_qkv.bias", "attn.c_attn.bias"},
    {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
    {"ffn_norm.weight", "ln_2.weight"},           {"ffn_norm.bias", "ln_2.bias"},
    {"ffn_up.weight", "mlp.c_fc.weight"},         {"ffn_up.bias", "mlp.c_fc.bias"},
    {"ffn_down.weight", "mlp.c_proj.weight"},     {"ffn_down.bias", "mlp.c_proj.bias"},
};

// The Hugging Face name of a GGUF tensor; empty for one the model does not use (rope_freqs is
// read into the configuration instead).
// Mamba's (llama.cpp's converter writes A = -exp(A_log) as ssm_a, read as "mixer.A", and the
// convolution squeezed to [inner, kernel]).
const std::pair<const char*, const char*> kMambaBlock[] = {
    {"attn_norm.weight", "norm.weight"},
    {"ssm_in.weight", "mixer.in_proj.weight"},
    {"ssm_in.bias", "mixer.in_proj.bias"},
    {"ssm_conv1d.weight", "mixer.conv1d.weight"},
    {"ssm_conv1d.bias", "mixer.conv1d.bias"},
    {"ssm_x.weight", "mixer.x_proj.weight"},
    {"ssm_dt.weight", "mixer.dt_proj.weight"},
    {"ssm_dt.bias", "mixer.dt_proj.bias"},
    {"ssm_a", "mixer.A"},
    {"ssm_d", "mixer.D"},
    {"ssm_out.weight", "mixer.out_proj.weight"},
    {"ssm_out.bias", "mixer.out_proj.bias"},
};

// T5's (llama.cpp's "t5": enc.blk.N.* and dec.blk.N.*; ffn_gate is wi_0 of the gated MLP, ffn_up
// its wi_1, or the ReLU MLP's wi when there is no gate).
const std::pair<const char*, const char*> kT5Encoder[] = {
    {"attn_norm.weight", "layer.0.layer_norm.weight"},
    {"attn_q.weight", "layer.0.SelfAttention.q.weight"},
    {"attn_k.weight", "layer.0.SelfAttention.k.weight"},
    {"attn_v.weight", "layer.0.SelfAttention.v.weight"},
    {"attn_o.weight", "layer.0.SelfAttention.o.weight"},
    {"attn_rel_b.weight", "layer.0.SelfAttention.relative_attention_bias.weight"},
    {"ffn_norm.weight", "layer.1.layer_norm.weight"},
    {"ffn_gate.weight", "layer.1.DenseReluDense.wi_0.weight"},
    {"ffn_down.weight", "layer.1.DenseReluDense.wo.weight"},
};
const std::pair<const char*, const char*> kT5Decoder[] = {
    {"attn_norm.weight", "layer.0.layer_norm.weight"},
    {"attn_q.weight", "layer.0.SelfAttention.q.weight"},
    {"attn_k.weight", "layer.0.SelfAttention.k.weight"},
    {"attn_v.weight", "layer.0.SelfAttention.v.weight"},
    {"attn_o.weight", "layer.0.SelfAttention.o.weight"},
    {"attn_rel_b.weight", "layer.0.SelfAttention.relative_attention_bias.weight"},
    {"cross_attn_norm.weight", "layer.1.layer_norm.weight"},
    {"cross_attn_q.weight", "layer.1.EncDecAttention.q.weight"},
    {"cross_attn_k.weight", "layer.1.EncDecAttention.k.weight"},
    {"cross_attn_v.weight", "layer.1.EncDecAttention.v.weight"},
    {"cross_attn_o.weight", "layer.1.EncDecAttention.o.weight"},
    {"ffn_norm.weight", "layer.2.layer_norm.weight"},
    {"ffn_gate.weight", "layer.2.DenseReluDense.wi_0.weight"},
    {"ffn_down.weight", "layer.2.DenseReluDense.wo.weight"},
};

// The Hugging Face name of a llama.cpp "t5" tensor; gated: the MLPs have ffn_gate.
std::string t5_hf_name(const std::string& name, bool gated) {
  if (name == "token_embd.weight") return "shared.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name == "enc.output_norm.weight") return "encoder.final_layer_norm.weight";
  if (name == "dec.output_norm.weight") return "decoder.final_layer_norm.weight";
  const bool enc = name.rfind("enc.blk.", 0) == 0, dec = name.rfind("dec.blk.", 0) == 0;
  if (!enc && !dec) return {};
  const size_t dot = name.find('.', 8);
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(8, dot - 8), rest = name.substr(dot + 1);
  const char* stack = enc ? "encoder" : "decoder";
  if (rest == "ffn_up.weight")
    return fmt::format("{}.block.{}.layer.{}.DenseReluDense.{}.weight", stack, layer, enc ? 1 : 2,
                       gated ? "wi_1" : "wi");
  using Names = std::span<const std::pair<const char*, const char*>>;
  for (const auto& [gguf, hf] : enc ? Names(kT5Encoder) : Names(kT5Decoder))
    if (rest == gguf) return fmt::format("{}.block.{}.{}", stack, layer, hf);
  return {};
}

// Which GGUF naming a block follows besides the Llama one.
enum class Names { kLlama, kGpt2, kGemma2, kPhi3, kMamba, kGptOss };

std::string hf_name(Names names, const std::string& name) {
  const bool gpt2 = names == Names::kGpt2;
  if (names == Names::kMamba) {
    if (name == "token_embd.weight") return "backbone.embeddings.weight";
    if (name == "output_norm.weight") return "backbone.norm_f.weight";
    if (name == "output.weight") return "lm_head.weight";
    if (name.rfind("blk.", 0) != 0) return {};
    const size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return {};
    const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
    for (const auto& [gguf, hf] : kMambaBlock)
      if (rest == gguf) return fmt::format("backbone.layers.{}.{}", layer, hf);
    return {};
  }
  if (gpt2) {
    if (name == "token_embd.weight") return "transformer.wte.weight";
    if (name == "position_embd.weight") return "transformer.wpe.weight";
    if (name == "output_norm.weight") return "transformer.ln_f.weight";
    if (name == "output_norm.bias") return "transformer.ln_f.bias";
  } else {
    if (name == "token_embd.weight") return "model.embed_tokens.weight";
    if (name == "output_norm.weight") return "model.norm.weight";
  }
  if (name == "output.weight") return "lm_head.weight";
  if (name.rfind("blk.", 0) != 0) return {};
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
  if (gpt2) {
    for (const auto& [gguf, hf] : kGpt2Block) {
      if (rest == gguf) return fmt::format("transformer.h.{}.{}", layer, hf);
    }
    return {};
  }
  // Gemma 2/3: a norm before and after attention and the MLP (llama.cpp's ffn_norm is the one
  // before the MLP); Phi-3: the fused projections.
  if (names == Names::kGemma2) {
    if (rest == "ffn_norm.weight")
      return fmt::format("model.layers.{}.pre_feedforward_layernorm.weight", layer);
    if (rest == "post_attention_norm.weight")
      return fmt::format("model.layers.{}.post_attention_layernorm.weight", layer);
    if (rest == "post_ffw_norm.weight")
      return fmt::format("model.layers.{}.post_feedforward_layernorm.weight", layer);
  }
  if (names == Names::kGptOss) {  // llama.cpp's "gpt-oss" (LLM_ARCH_OPENAI_MOE)
    static const std::pair<const char*, const char*> kGptOss[] = {
        {"post_attention_norm.weight", "post_attention_layernorm.weight"},
        {"attn_sinks.weight", "self_attn.sinks"},
        {"attn_sinks", "self_attn.sinks"},
        {"ffn_gate_inp.weight", "mlp.router.weight"},
        {"ffn_gate_inp.bias", "mlp.router.bias"},
        {"ffn_gate_exps.bias", "mlp.experts.gate_proj_bias"},
        {"ffn_up_exps.bias", "mlp.experts.up_proj_bias"},
        {"ffn_down_exps.bias", "mlp.experts.down_proj_bias"},
    };
    for (const auto& [gguf, hf] : kGptOss)
      if (rest == gguf) return fmt::format("model.layers.{}.{}", layer, hf);
  }
  if (names == Names::kPhi3) {
    if (rest == "attn_qkv.weight")
      return fmt::format("model.layers.{}.self_attn.qkv_proj.weight", layer);
    if (rest == "ffn_up.weight")
      return fmt::format("model.layers.{}.mlp.gate_up_proj.weight", layer);
  }
  for (const auto& [gguf, hf] : kLlamaBlock) {
    if (rest == gguf) return fmt::format("model.layers.{}.{}", layer, hf);
  }
  // Older Mixtral files: one tensor per expert, blk.N.ffn_{gate,up,down}.E.weight.
  for (const char* m : {"gate", "up", "down"}) {
    const std::string head = fmt::format("ffn_{}.", m);
    if (rest.rfind(head, 0) != 0 || rest.size() <= head.size() + 7 ||
        rest.compare(rest.size() - 7, 7, ".weight") != 0)
      continue;
    const std::string e = rest.substr(head.size(), rest.size() - 7 - head.size());
    if (e.empty() || e.find_first_not_of("0123456789") != std::string::npos) continue;
    return fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, e, m);
  }
  return {};
}

int64_t positive(const GgufFile& f, const std::string& key) {
  const uint64_t v = f.get_uint(key);
  if (v == 0 || v > (uint64_t{1} << 31)) fail("GGUF metadata '{}' is {}: out of range", key, v);
  return static_cast<int64_t>(v);
}

// Gemma 1/2/3 as llama.cpp runs them: GELU (tanh) MLP, embeddings scaled by sqrt(hidden), and
// norms stored with the 1 already added (its converter writes 1 + w). Gemma 2/3: norms after
// attention and the MLP; the score scale 1/sqrt(head_dim), or 1/sqrt(hidden / heads) for the 27B
// models (46 / 62 layers), which llama.cpp derives rather than reads; sliding-window layers in a
// pattern (every 2nd global in Gemma 2, every 6th in Gemma 3); Gemma 2's soft-caps (llama.cpp's
// defaults 50 and 30 when the keys are absent); Gemma 3's q/k norms and its local layers' RoPE
// base of 10000.
void read_gemma(const GgufFile& f, const std::string& arch, const std::string& path,
                ModelConfig& c) {
  const std::string p = arch + ".";
  c.act = ModelConfig::Act::kGeluTanh;
  c.norm_plus_one = false;
  c.embed_scale = std::sqrt(static_cast<float>(c.dim));
  if (arch == "gemma") return;
  c.post_norms = true;
  const bool big = c.n_layers == (arch == "gemma2" ? 46 : 62);
  c.attn_scale = static_cast<float>(
      f.find(p + "attention.scale") ? f.get_float(p + "attention.scale", 0.0)
                                    : 1.0 / std::sqrt(big ? static_cast<double>(c.dim / c.n_heads)
                                                          : static_cast<double>(c.head_dim)));
  const bool g2 = arch == "gemma2";
  if (g2) {
    c.attn_softcap = static_cast<float>(f.get_float(p + "attn_logit_softcapping", 50.0));
    c.final_softcap = static_cast<float>(f.get_float(p + "final_logit_softcapping", 30.0));
  } else {
    c.qk_norm = true;
    c.has_local_rope = true;
    c.local_rope.theta = 10000.0;
    c.local_rope.rot_dim = c.rope.rot_dim;
    if (!f.find(p + "attention.sliding_window"))
      fail("'{}': {}attention.sliding_window is missing", path, p);
  }
  c.sliding_window = static_cast<int64_t>(f.get_uint(p + "attention.sliding_window", 4096));
  const uint64_t pattern = f.get_uint(p + "attention.sliding_window_pattern", g2 ? 2 : 6);
  if (pattern == 0 || pattern > 1024)
    fail("'{}': {}attention.sliding_window_pattern {} is out of range", path, p, pattern);
  c.layer_sliding.assign(static_cast<size_t>(c.n_layers), 0);
  for (int64_t l = 0; l < c.n_layers; ++l)
    c.layer_sliding[l] = static_cast<uint64_t>(l) % pattern < pattern - 1;
}

// A mixture of experts: llama.cpp's {arch}.expert_* keys; a layer is sparse where it has a
// router (blk.N.ffn_gate_inp). "llama" with experts is Mixtral. Whether the chosen experts'
// weights are renormalized is fixed per architecture in llama.cpp (Mixtral, Qwen3-MoE: yes;
// Qwen2-MoE, OLMoE: no) unless {arch}.expert_weights_norm says.
void read_moe(const GgufFile& f, const std::string& p, const std::string& path, ModelConfig& c) {
  const std::string arch = p.substr(0, p.size() - 1);
  if (arch != "llama" && arch != "qwen2moe" && arch != "qwen3moe" && arch != "olmoe" &&
      arch != "gpt-oss")
    fail(ErrorKind::kUnsupported, "'{}': experts in a '{}' GGUF are not supported", path, arch);
  if (arch == "llama") c.architecture = "MixtralForCausalLM";
  c.n_experts = positive(f, p + "expert_count");
  c.n_experts_used = positive(f, p + "expert_used_count");
  c.expert_ffn_dim = f.find(p + "expert_feed_forward_length")
                         ? positive(f, p + "expert_feed_forward_length")
                         : c.ffn_dim;
  if (f.find(p + "expert_shared_feed_forward_length"))
    c.shared_ffn_dim = positive(f, p + "expert_shared_feed_forward_length");
  else if (const GgufTensorInfo* t = f.tensor("blk.0.ffn_gate_shexp.weight");
           t != nullptr && t->ne.size() == 2)
    c.shared_ffn_dim = t->ne[1];
  c.shared_expert_gate = f.tensor("blk.0.ffn_gate_inp_shexp.weight") != nullptr;
  c.norm_topk_prob = f.get_bool(p + "expert_weights_norm", arch == "llama" || arch == "qwen3moe");
  c.layer_moe.assign(static_cast<size_t>(c.n_layers), 0);
  for (int64_t l = 0; l < c.n_layers; ++l)
    c.layer_moe[l] = f.tensor(fmt::format("blk.{}.ffn_gate_inp.weight", l)) != nullptr;
}

}  // namespace

namespace {
// The vocabulary's size: token_embd's rows.
int64_t vocab_size_of(const GgufFile& f, const std::string& path) {
  const GgufTensorInfo* emb = f.tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    fail("'{}': tensor 'token_embd.weight' is missing or not a matrix", path);
  return emb->ne[1];
}

// llama.cpp's "gptneox" (Pythia, GPT-NeoX): LayerNorms with biases, the fused attn_qkv as
// [q; k; v] (its converter regroups Hugging Face's head-by-head rows), rope.dimension_count
// dimensions rotated in halves, use_parallel_residual. The MLP's GELU is the exact one the
// configs name ("gelu"); llama.cpp computes its tanh approximation.
ModelConfig gguf_gptneox_config(const GgufFile& f, const std::string& path) {
  ModelConfig c;
  c.format = "gguf";
  c.arch = Arch::kGptJ;
  c.architecture = "GPTNeoXForCausalLM";
  c.gptj_names = ModelConfig::GptJNames::kNeoX;
  c.qkv_layout = ModelConfig::QkvLayout::kStacked;
  const std::string p = "gptneox.";
  c.dim = positive(f, p + "embedding_length");
  c.n_layers = positive(f, p + "block_count");
  c.ffn_dim = positive(f, p + "feed_forward_length");
  c.n_heads = c.n_kv_heads = positive(f, p + "attention.head_count");
  c.max_seq_len = positive(f, p + "context_length");
  c.head_dim = c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 0;
  c.rope.theta = f.get_float(p + "rope.freq_base", 10000.0);
  const uint64_t rot = f.get_uint(p + "rope.dimension_count", static_cast<uint64_t>(c.head_dim));
  if (rot == 0 || rot > static_cast<uint64_t>(c.head_dim))
    fail("'{}': {}rope.dimension_count {} is out of range (heads are {} wide)", path, p, rot,
         c.head_dim);
  c.rope.rot_dim = static_cast<int64_t>(rot);
  c.rope_style = kernels::RopeStyle::kHalf;
  c.norm_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_epsilon", 1e-5));
  c.parallel_residual = f.get_bool(p + "use_parallel_residual", true);
  c.two_norms = true;
  c.act = ModelConfig::Act::kGeluErf;
  c.vocab_size = vocab_size_of(f, path);
  c.tied_embeddings = f.tensor("output.weight") == nullptr;
  c.qkv_bias = f.tensor("blk.0.attn_qkv.bias") != nullptr;
  c.o_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  c.bos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.bos_token_id", 0));
  c.eos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.eos_token_id", 0));
  c.validate("'" + path + "'");
  return c;
}

// GGUF's names of a gptneox block and Hugging Face's GPT-NeoX names.
const std::pair<const char*, const char*> kNeoXBlock[] = {
    {"attn_norm", "input_layernorm"},   {"attn_qkv", "attention.query_key_value"},
    {"attn_output", "attention.dense"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_up", "mlp.dense_h_to_4h"},    {"ffn_down", "mlp.dense_4h_to_h"},
};

std::string neox_hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "gpt_neox.embed_in.weight";
  if (name == "output_norm.weight") return "gpt_neox.final_layer_norm.weight";
  if (name == "output_norm.bias") return "gpt_neox.final_layer_norm.bias";
  if (name == "output.weight") return "embed_out.weight";
  if (name.rfind("blk.", 0) != 0) return {};
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
  for (const auto& [gguf, hf] : kNeoXBlock)
    for (const char* what : {".weight", ".bias"})
      if (rest == std::string(gguf) + what)
        return fmt::format("gpt_neox.layers.{}.{}{}", layer, hf, what);
  return {};
}

// llama.cpp's "mamba": the mixer's sizes under {arch}.ssm.*, no attention (its head count 0).
ModelConfig gguf_mamba_config(const GgufFile& f, const std::string& path) {
  ModelConfig c;
  c.format = "gguf";
  c.arch = Arch::kMamba;
  c.architecture = "MambaForCausalLM";
  const std::string p = "mamba.";
  c.dim = positive(f, p + "embedding_length");
  c.n_layers = positive(f, p + "block_count");
  c.n_heads = c.n_kv_heads = c.head_dim = 1;
  c.ssm_conv_kernel = positive(f, p + "ssm.conv_kernel");
  c.ssm_inner = positive(f, p + "ssm.inner_size");
  c.ssm_state = positive(f, p + "ssm.state_size");
  c.ssm_dt_rank = positive(f, p + "ssm.time_step_rank");
  c.ffn_dim = c.ssm_inner;
  if (f.get_bool(p + "ssm.dt_b_c_rms", false))
    fail(ErrorKind::kUnsupported,
         "'{}': mamba.ssm.dt_b_c_rms (Falcon-Mamba's norms of dt, B and C) is not supported", path);
  c.max_seq_len = std::min<int64_t>(
      static_cast<int64_t>(f.get_uint(p + "context_length", uint64_t{1} << 20)), int64_t{1} << 24);
  c.norm_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.vocab_size = vocab_size_of(f, path);
  c.tied_embeddings = f.tensor("output.weight") == nullptr;
  c.ssm_conv_bias = f.tensor("blk.0.ssm_conv1d.bias") != nullptr;
  c.ssm_proj_bias = f.tensor("blk.0.ssm_in.bias") != nullptr;
  c.bos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.bos_token_id", 0));
  c.eos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.eos_token_id", 0));
  c.validate("'" + path + "'");
  return c;
}
}  // namespace

namespace {
// llama.cpp's "t5": T5's sizes under t5.*; the decoder's layer count apart when the file says
// so; relative-position buckets over llama.cpp's fixed maximum distance of 128; a gated MLP when
// the blocks have ffn_gate. llama.cpp applies no d_model^-0.5 before the head, tied or not (the
// converter writes the checkpoint's lm_head as output): neither does a GGUF here, so that it runs
// as llama.cpp runs it.
ModelConfig gguf_t5_config(const GgufFile& f, const std::string& path) {
  ModelConfig c;
  c.format = "gguf";
  c.arch = Arch::kT5;
  c.architecture = "T5ForConditionalGeneration";
  const std::string p = "t5.";
  c.dim = positive(f, p + "embedding_length");
  c.ffn_dim = positive(f, p + "feed_forward_length");
  c.n_encoder_layers = positive(f, p + "block_count");
  c.n_layers = f.find(p + "decoder_block_count") ? positive(f, p + "decoder_block_count")
                                                 : c.n_encoder_layers;
  c.n_heads = c.n_kv_heads = positive(f, p + "attention.head_count");
  c.head_dim = positive(f, p + "attention.key_length");
  if (f.get_uint(p + "attention.value_length", static_cast<uint64_t>(c.head_dim)) !=
      static_cast<uint64_t>(c.head_dim))
    fail(ErrorKind::kUnsupported, "'{}': t5 key and value lengths differ", path);
  c.rel_buckets = static_cast<int64_t>(f.get_uint(p + "attention.relative_buckets_count", 32));
  c.rel_max_distance = 128;
  c.norm_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6));
  c.max_seq_len = static_cast<int64_t>(f.get_uint(p + "context_length", 512));
  c.decoder_start_id = static_cast<int32_t>(f.get_uint(p + "decoder_start_token_id", 0));
  c.gated_ffn = f.tensor("enc.blk.0.ffn_gate.weight") != nullptr;
  c.tied_embeddings = false;  // llama.cpp's: no scaling before the head (see above)
  c.vocab_size = vocab_size_of(f, path);
  c.eos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.eos_token_id", 1));
  c.validate("'" + path + "'");
  return c;
}
// llama.cpp's "bert" (BertModel, and XLM-RoBERTa rerankers): its converter drops RoBERTa's
// first pad_token_id + 1 position rows, so positions count from 0 here; a classifier head where
// the file has cls (dense, tanh) and cls.output (one row per label: a reranker's one score).
// llama.cpp's "jina-bert-v2" as "bert" with ALiBi (no position table) and a GEGLU MLP;
// llama.cpp's "nomic-bert" the same, with rotary positions (rope.freq_base, NEOX halves), a fused
// attn_qkv and a SwiGLU MLP (ffn_up the value, ffn_gate the gate), without biases or a head.
ModelConfig gguf_bert_config(const GgufFile& f, const std::string& path) {
  ModelConfig c;
  c.format = "gguf";
  c.arch = Arch::kBert;
  c.architecture = "BertModel";
  const std::string arch = f.get_string("general.architecture");
  const std::string p = arch + ".";
  if (arch == "jina-bert-v2") {
    c.architecture = "JinaBertModel";
    c.encoder_kind = ModelConfig::EncoderKind::kJina;
    c.gated_ffn = true;
    for (const char* t : {"blk.0.attn_q_norm.weight", "blk.0.attn_norm_2.weight", "cls.weight"})
      if (f.tensor(t))
        fail(ErrorKind::kUnsupported,
             "'{}': a jina-bert-v2 with '{}' (the qk-post-norm code models, the reranker head) "
             "is not supported",
             path, t);
  }
  if (arch == "nomic-bert") {
    c.architecture = "NomicBertModel";
    c.encoder_kind = ModelConfig::EncoderKind::kNomic;
    c.gated_ffn = true;
    c.rope.theta = f.get_float(p + "rope.freq_base", 10000.0);
    c.rope_style = kernels::RopeStyle::kHalf;
  }
  c.dim = positive(f, p + "embedding_length");
  c.n_layers = positive(f, p + "block_count");
  c.ffn_dim = positive(f, p + "feed_forward_length");
  c.n_heads = c.n_kv_heads = positive(f, p + "attention.head_count");
  if (c.dim % c.n_heads != 0)
    fail("'{}': embedding_length {} is not a multiple of head_count {}", path, c.dim, c.n_heads);
  c.head_dim = c.dim / c.n_heads;
  c.max_seq_len = positive(f, p + "context_length");
  c.norm_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_epsilon", 1e-12));
  if (f.get_bool(p + "attention.causal", false))
    fail(ErrorKind::kUnsupported, "'{}': a causal bert is not supported", path);
  const GgufTensorInfo* types = f.tensor("token_types.weight");
  c.type_vocab_size = types && types->ne.size() == 2 ? types->ne[1] : 0;
  c.vocab_size = vocab_size_of(f, path);
  if (const GgufTensorInfo* out = arch == "bert" ? f.tensor("cls.output.weight") : nullptr) {
    if (!f.tensor("cls.weight"))
      fail("'{}': cls.output.weight without cls.weight (the head's dense layer)", path);
    c.classifier = ModelConfig::Classifier::kRobertaHead;
    c.architecture = "BertForSequenceClassification";
    c.num_labels = out->ne.size() == 2 ? out->ne[1] : 1;
    for (int64_t i = 0; i < c.num_labels; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  }
  c.validate("'" + path + "'");
  return c;
}

using NamePairs = std::span<const std::pair<const char*, const char*>>;

// The Hugging Face name of a llama.cpp encoder tensor: the top-level names, and the blocks'
// blk.N.<ggml>.{weight,bias} as <layers>.N.<hf>.{weight,bias}.
std::string encoder_hf_name(const std::string& name, NamePairs top, NamePairs block,
                            const char* layers) {
  for (const auto& [g, h] : top)
    if (name == g) return h;
  if (name.rfind("blk.", 0) != 0) return {};
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
  for (const char* suffix : {".weight", ".bias"}) {
    if (!rest.ends_with(suffix)) continue;
    const std::string base = rest.substr(0, rest.size() - std::strlen(suffix));
    for (const auto& [g, h] : block)
      if (base == g) return fmt::format("{}.{}.{}{}", layers, layer, h, suffix);
  }
  return {};
}

// A llama.cpp "bert" tensor's name in transformers' BertModel.
std::string bert_hf_name(const std::string& name) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "embeddings.word_embeddings.weight"},
      {"token_types.weight", "embeddings.token_type_embeddings.weight"},
      {"position_embd.weight", "embeddings.position_embeddings.weight"},
      {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
      {"token_embd_norm.bias", "embeddings.LayerNorm.bias"},
      {"cls.weight", "classifier.dense.weight"},
      {"cls.bias", "classifier.dense.bias"},
      {"cls.output.weight", "classifier.out_proj.weight"},
      {"cls.output.bias", "classifier.out_proj.bias"}};
  static const std::pair<const char*, const char*> kBlock[] = {
      {"attn_q", "attention.self.query"},
      {"attn_k", "attention.self.key"},
      {"attn_v", "attention.self.value"},
      {"attn_output", "attention.output.dense"},
      {"attn_output_norm", "attention.output.LayerNorm"},
      {"ffn_up", "intermediate.dense"},
      {"ffn_down", "output.dense"},
      {"layer_output_norm", "output.LayerNorm"}};
  return encoder_hf_name(name, kTop, kBlock, "encoder.layer");
}

// A llama.cpp "jina-bert-v2" tensor's name in JinaBertModel: its MLP's (the converter's halves of
// gated_layers: gated_layers_w the gate, gated_layers_v the up projection), the rest BERT's.
std::string jina_bert_hf_name(const std::string& name) {
  static const std::pair<const char*, const char*> kMlp[] = {
      {"ffn_gate", "mlp.gated_layers_w"},
      {"ffn_up", "mlp.gated_layers_v"},
      {"ffn_down", "mlp.wo"},
      {"layer_output_norm", "mlp.layernorm"}};
  const std::string mlp = encoder_hf_name(name, {}, kMlp, "encoder.layer");
  return mlp.empty() ? bert_hf_name(name) : mlp;
}

// A llama.cpp "nomic-bert" tensor's name in nomic-ai's NomicBertModel.
std::string nomic_bert_hf_name(const std::string& name) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "embeddings.word_embeddings.weight"},
      {"token_types.weight", "embeddings.token_type_embeddings.weight"},
      {"token_embd_norm.weight", "emb_ln.weight"},
      {"token_embd_norm.bias", "emb_ln.bias"}};
  static const std::pair<const char*, const char*> kBlock[] = {
      {"attn_qkv", "attn.Wqkv"},     {"attn_output", "attn.out_proj"},
      {"attn_output_norm", "norm1"}, {"ffn_up", "mlp.fc11"},
      {"ffn_gate", "mlp.fc12"},      {"ffn_down", "mlp.fc2"},
      {"layer_output_norm", "norm2"}};
  return encoder_hf_name(name, kTop, kBlock, "encoder.layers");
}
}  // namespace

ModelConfig gguf_model_config(const GgufFile& f, const std::string& path) {
  if (f.get_string("general.architecture") == "mamba") return gguf_mamba_config(f, path);
  if (f.get_string("general.architecture") == "t5") return gguf_t5_config(f, path);
  if (f.get_string("general.architecture") == "gptneox") return gguf_gptneox_config(f, path);
  if (const std::string a = f.get_string("general.architecture");
      a == "bert" || a == "nomic-bert" || a == "jina-bert-v2")
    return gguf_bert_config(f, path);
  ModelConfig c;
  c.format = "gguf";
  const std::string arch = f.get_string("general.architecture");
  // llama.cpp's architectures: "llama" covers Llama 1-3, Mistral (and, with experts, Mixtral)
  // and rotates adjacent pairs (its converter permuted Q and K for it); the others rotate halves
  // (NEOX).
  struct Known {
    const char *gguf, *hf;
    bool qkv_bias, qk_norm, qk_norm_full, fused_qkv;
  };
  static const Known kKnown[] = {
      {"llama", "LlamaForCausalLM", false, false, false, false},
      {"qwen2", "Qwen2ForCausalLM", true, false, false, false},
      {"qwen3", "Qwen3ForCausalLM", false, true, false, false},
      {"qwen2moe", "Qwen2MoeForCausalLM", true, false, false, false},
      {"qwen3moe", "Qwen3MoeForCausalLM", false, true, false, false},
      {"olmoe", "OlmoeForCausalLM", false, true, true, false},
      {"gemma", "GemmaForCausalLM", false, false, false, false},
      {"gemma2", "Gemma2ForCausalLM", false, false, false, false},
      {"gemma3", "Gemma3ForCausalLM", false, false, false, false},
      {"phi3", "Phi3ForCausalLM", false, false, false, true},
      {"gpt2", "GPT2LMHeadModel", false, false, false, false},
      {"gpt-oss", "GptOssForCausalLM", true, false, false, false},
  };
  const Known* k = nullptr;
  for (const Known& e : kKnown)
    if (arch == e.gguf) k = &e;
  if (k == nullptr)
    fail(ErrorKind::kUnsupported,
         "'{}': GGUF architecture '{}' (general.architecture) is not supported (llama, qwen2, "
         "qwen3, qwen2moe, qwen3moe, olmoe, gemma, gemma2, gemma3, phi3, gpt2, gpt-oss, gptneox, "
         "mamba, t5, "
         "bert, nomic-bert, jina-bert-v2)",
         path, arch);
  c.architecture = k->hf;
  c.rope_style = arch == "llama" ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kHalf;
  c.qkv_bias = k->qkv_bias;
  c.qk_norm = k->qk_norm;
  c.qk_norm_full = k->qk_norm_full;
  c.fused_qkv = k->fused_qkv;
  c.arch = arch == "gpt2" ? Arch::kGpt2 : Arch::kLlama;
  const std::string p = arch + ".";
  c.dim = positive(f, p + "embedding_length");
  c.n_layers = positive(f, p + "block_count");
  c.ffn_dim = positive(f, p + "feed_forward_length");
  c.n_heads = positive(f, p + "attention.head_count");
  c.n_kv_heads = static_cast<int64_t>(f.get_uint(p + "attention.head_count_kv", c.n_heads));
  c.max_seq_len = positive(f, p + "context_length");
  c.head_dim = c.n_heads > 0 && c.dim % c.n_heads == 0 ? c.dim / c.n_heads : 0;
  if (f.find(p + "attention.key_length"))
    c.head_dim = static_cast<int64_t>(f.get_uint(p + "attention.key_length"));
  if (f.find(p + "rope.dimension_count")) {
    const uint64_t rot = f.get_uint(p + "rope.dimension_count");
    if (rot == 0 || rot > static_cast<uint64_t>(c.head_dim))
      fail("'{}': {}rope.dimension_count {} is out of range (heads are {} wide)", path, p, rot,
           c.head_dim);
    c.rope.rot_dim = static_cast<int64_t>(rot);
  }
  c.norm_eps = static_cast<float>(
      f.get_float(p + (c.arch == Arch::kGpt2 ? "attention.layer_norm_epsilon"
                                             : "attention.layer_norm_rms_epsilon"),
                  1e-5));
  c.rope.theta = f.get_float(p + "rope.freq_base", 10000.0);
  // llama.cpp's scaling keys (Llama 3.1's scaling comes as the rope_freqs tensor instead).
  const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear" || scaling == "yarn") {
    c.rope.kind = scaling == "linear" ? RopeParams::Kind::kLinear : RopeParams::Kind::kYarn;
    c.rope.factor = f.get_float(p + "rope.scaling.factor", 1.0);
    c.rope.original_max_pos = static_cast<int64_t>(f.get_uint(
        p + "rope.scaling.original_context_length", static_cast<uint64_t>(c.max_seq_len)));
    // llama.cpp multiplies its attn_factor (default 1) with YaRN's own 0.1 ln(factor) + 1.
    if (c.rope.kind == RopeParams::Kind::kYarn)
      c.rope.attention_factor =
          f.get_float(p + "rope.scaling.attn_factor", 1.0) * yarn_mscale(c.rope.factor);
    c.rope.beta_fast = f.get_float(p + "rope.scaling.yarn_beta_fast", 32.0);
    c.rope.beta_slow = f.get_float(p + "rope.scaling.yarn_beta_slow", 1.0);
  } else if (scaling != "none") {
    fail(ErrorKind::kUnsupported,
         "'{}': {}rope.scaling.type '{}' is not supported (none, linear, yarn are)", path, p,
         scaling);
  }
  c.vocab_size = vocab_size_of(f, path);
  c.tied_embeddings = f.tensor("output.weight") == nullptr;
  if (c.arch == Arch::kLlama) {  // biases where the file has them (llama with attention_bias)
    c.qkv_bias = c.qkv_bias || f.tensor("blk.0.attn_q.bias") != nullptr;
    c.o_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  }
  if (f.find(p + "expert_count")) read_moe(f, p, path, c);
  if (arch.rfind("gemma", 0) == 0) read_gemma(f, arch, path, c);
  if (arch == "gpt-oss") {
    // gpt-oss as llama.cpp runs it: biases on the router and experts, the clamped SwiGLU (its
    // constants are not in the file), sinks, the softmax over the chosen experts' logits, and
    // sliding layers (attention.sliding_window) from the first, every other one.
    c.moe_names = ModelConfig::MoeNames::kGptOss;
    c.moe_bias = c.clamped_swiglu = c.attn_sinks = c.norm_topk_prob = true;
    c.sliding_window = static_cast<int64_t>(f.get_uint(p + "attention.sliding_window", 128));
    c.layer_sliding.assign(static_cast<size_t>(c.n_layers), 0);
    for (int64_t l = 0; l < c.n_layers; l += 2) c.layer_sliding[l] = 1;
  }
  if (arch == "phi3") {
    if (f.tensor("blk.0.attn_qkv.weight") == nullptr)
      fail(ErrorKind::kUnsupported, "'{}': a phi3 GGUF without fused attn_qkv is not supported",
           path);
    const uint64_t w = f.get_uint(p + "attention.sliding_window", 0);
    if (w > 0 && w < static_cast<uint64_t>(c.max_seq_len))
      c.sliding_window = static_cast<int64_t>(w);  // every layer
  }
  c.bos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.bos_token_id", 1));
  c.eos_id = static_cast<int32_t>(f.get_uint("tokenizer.ggml.eos_token_id", 2));
  c.validate("'" + path + "'");
  return c;
}

namespace {
// GGUF's rope_freqs.weight (F32, one divisor per rotated pair) into c.rope.freq_factors.
// A RoPE tensor of GGUF: F32, one value per rotated pair of c's heads.
std::vector<double> rope_tensor(const GgufFile& f, const uint8_t* data, const std::string& path,
                                const ModelConfig& c, const char* name) {
  const GgufTensorInfo* t = f.tensor(name);
  const int64_t half = (c.rope.rot_dim > 0 ? c.rope.rot_dim : c.head_dim) / 2;
  if (t == nullptr || t->type != GgmlType::kF32 || t->ne.size() != 1 || t->ne[0] != half)
    fail("'{}': tensor '{}' must be F32 of {} values", path, name, half);
  std::vector<float> v(static_cast<size_t>(half));
  std::memcpy(v.data(), data + t->offset, v.size() * sizeof(float));
  return {v.begin(), v.end()};
}

void read_rope_freqs(const GgufFile& f, const uint8_t* data, const std::string& path,
                     ModelConfig& c) {
  if (f.tensor("rope_freqs.weight") == nullptr) return;
  c.rope.freq_factors = rope_tensor(f, data, path, c, "rope_freqs.weight");
  c.validate("'" + path + "'");
}

// Phi-3's LongRoPE: rope_factors_short / rope_factors_long (F32, one per rotated pair), the
// pretrained context in rope.scaling.original_context_length and the attention factor llama.cpp's
// converter derives in rope.scaling.attn_factor.
void read_rope_factors(const GgufFile& f, const uint8_t* data, const std::string& path,
                       ModelConfig& c) {
  const GgufTensorInfo* s = f.tensor("rope_factors_short.weight");
  const GgufTensorInfo* l = f.tensor("rope_factors_long.weight");
  if (s == nullptr && l == nullptr) return;
  c.rope.kind = RopeParams::Kind::kLongRope;
  c.rope.short_factor = rope_tensor(f, data, path, c, "rope_factors_short.weight");
  c.rope.long_factor = rope_tensor(f, data, path, c, "rope_factors_long.weight");
  const std::string p = f.get_string("general.architecture") + ".";
  c.rope.original_max_pos = static_cast<int64_t>(
      f.get_uint(p + "rope.scaling.original_context_length", static_cast<uint64_t>(c.max_seq_len)));
  if (c.rope.original_max_pos <= 0 || c.rope.original_max_pos > c.max_seq_len)
    fail("'{}': {}rope.scaling.original_context_length is out of range", path, p);
  c.rope.factor = static_cast<double>(c.max_seq_len) / static_cast<double>(c.rope.original_max_pos);
  c.rope.attention_factor = f.get_float(p + "rope.scaling.attn_factor", 0.0);
  c.validate("'" + path + "'");
}
}  // namespace

namespace {

// Registers one tensor of a GGUF file (its bytes at data + t.offset) as `name`.
void add_gguf_tensor(WeightStore& store, const std::string& name, const GgufTensorInfo& t,
                     const uint8_t* data, int index, const std::string& path) {
  const auto info = ggml_type_info(static_cast<uint32_t>(t.type));
  if (!ggml_can_dequantize(t.type))
    fail(ErrorKind::kUnsupported, "'{}': tensor '{}' is {}, a type tokenflow cannot read", path,
         t.name, info->name);
  // ggml's ne is innermost first: [in, out] is the row-major [out, in] the model reads.
  Shape shape;
  shape.rank = static_cast<int>(t.ne.size());
  for (int d = 0; d < shape.rank; ++d) shape.dims[d] = t.ne[shape.rank - 1 - d];
  if (shape.rank == 1 && name.ends_with("shared_expert_gate.weight"))
    shape = Shape{1, shape.dims[0]};  // llama.cpp keeps the [1, hidden] gate as a vector
  const uint8_t* bytes = data + t.offset;
  if (t.type == GgmlType::kF32) {
    store.add(name, TensorView{DType::kF32, shape, bytes}, index);
  } else if (t.type == GgmlType::kF16) {
    store.add(name, TensorView{DType::kF16, shape, bytes}, index);
  } else if (t.type == GgmlType::kBF16) {
    store.add(name, TensorView{DType::kBF16, shape, bytes}, index);
  } else {
    store.add_blocks(name, shape, *block_weight_type(t.type), bytes, index);
  }
}

}  // namespace

ModelConfig load_gguf(const std::string& path, WeightStore& store) {
  MappedFile file = MappedFile::open(path);
  const GgufFile f = parse_gguf(file.data(), file.size(), path);
  ModelConfig c = gguf_model_config(f, path);
  // llama.cpp's {arch}.pooling_type, read with the rest of the header: 1 mean, 2 cls, 3 last
  // (0 none, 4 rank: a classifier's).
  if (const std::string key = f.get_string("general.architecture") + ".pooling_type"; f.find(key)) {
    const uint64_t t = f.get_uint(key);
    if (t >= 1 && t <= 3) c.embedding_pooling = t == 1 ? "mean" : t == 2 ? "cls" : "last";
  }
  const uint8_t* data = file.data() + f.data_offset;
  read_rope_freqs(f, data, path, c);
  read_rope_factors(f, data, path, c);
  // Every tensor is read once, in file order, and copied (WeightStore::own_copy): read ahead.
  ::madvise(const_cast<uint8_t*>(file.data()), file.size(), MADV_SEQUENTIAL);
  const int index = store.add_file(std::move(file));
  store.set_keep_stored_types(true);
  const Names names = c.arch == Arch::kGpt2                           ? Names::kGpt2
                      : c.arch == Arch::kMamba                        ? Names::kMamba
                      : c.post_norms                                  ? Names::kGemma2
                      : c.architecture == "Phi3ForCausalLM"           ? Names::kPhi3
                      : c.moe_names == ModelConfig::MoeNames::kGptOss ? Names::kGptOss
                                                                      : Names::kLlama;
  for (const GgufTensorInfo& t : f.tensors) {
    const std::string name =
        c.arch == Arch::kT5                                  ? t5_hf_name(t.name, c.gated_ffn)
        : c.encoder_kind == ModelConfig::EncoderKind::kNomic ? nomic_bert_hf_name(t.name)
        : c.encoder_kind == ModelConfig::EncoderKind::kJina  ? jina_bert_hf_name(t.name)
        : c.arch == Arch::kBert                              ? bert_hf_name(t.name)
        : c.arch == Arch::kGptJ                              ? neox_hf_name(t.name)
                                                             : hf_name(names, t.name);
    if (name.empty()) continue;
    add_gguf_tensor(store, name, t, data, index, path);
  }
  return c;
}

GgufFile load_gguf_tensors(const std::string& path, WeightStore& store) {
  MappedFile file = MappedFile::open(path);
  GgufFile f = parse_gguf(file.data(), file.size(), path);
  const uint8_t* data = file.data() + f.data_offset;
  const int index = store.add_file(std::move(file));
  for (const GgufTensorInfo& t : f.tensors) add_gguf_tensor(store, t.name, t, data, index, path);
  return f;
}

}  // namespace tf
