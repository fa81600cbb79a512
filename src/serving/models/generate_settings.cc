#include "serving/models/generate_settings.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <unordered_set>

#include "core/json.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "serving/core/api_common.h"

namespace tf {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Hugging Face's GenerationConfig keys that change what generate() produces but that tokenflow
// does not apply: a request naming one is refused by name, a generation_config.json holding one
// is served with a warning.
const std::unordered_set<std::string> kNotApplied = {"forced_bos_token_id",
                                                     "forced_eos_token_id",
                                                     "suppress_tokens",
                                                     "begin_suppress_tokens",
                                                     "forced_decoder_ids",
                                                     "diversity_penalty",
                                                     "num_beam_groups",
                                                     "penalty_alpha",
                                                     "epsilon_cutoff",
                                                     "eta_cutoff",
                                                     "encoder_repetition_penalty",
                                                     "encoder_no_repeat_ngram_size",
                                                     "exponential_decay_length_penalty",
                                                     "renormalize_logits",
                                                     "sequence_bias",
                                                     "guidance_scale",
                                                     "constraints",
                                                     "force_words_ids",
                                                     "max_time",
                                                     "stop_strings",
                                                     "dola_layers",
                                                     "watermarking_config",
                                                     "token_healing",
                                                     "top_h"};

// Settings generate() takes that mean nothing more here (bos is the prompt's business).
const std::unordered_set<std::string> kHarmless = {"bos_token_id", "use_cache",
                                                   "decoder_start_token_id"};

const std::unordered_set<std::string> kSettings = {
    "max_length",   "max_new_tokens", "min_length",           "min_new_tokens",
    "do_sample",    "early_stopping", "temperature",          "top_p",
    "min_p",        "typical_p",      "repetition_penalty",   "length_penalty",
    "top_k",        "num_beams",      "num_return_sequences", "no_repeat_ngram_size",
    "pad_token_id", "eos_token_id",   "bad_words_ids",        "seed"};

// Settings the generate signature shares with tokenflow's own (same names, either meaning).
const std::unordered_set<std::string> kShared = {
    "temperature",          "top_p", "top_k", "min_p", "typical_p", "repetition_penalty",
    "no_repeat_ngram_size", "seed"};

[[noreturn]] void bad_setting(const std::string& field, const std::string& message) {
  throw HttpError(400, message, "", field);
}

const json& scalar(const json& v) {
  return v.is_array() && v.size() == 1 ? v[0] : v;
}

int32_t int_setting(const json& raw, const std::string& k, const std::string& where) {
  const json& v = scalar(raw);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                              : v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX))
    bad_setting(k, fmt::format("{} '{}' must be a 32-bit integer, not {}", where, k, raw.dump()));
  return static_cast<int32_t>(v.get<int64_t>());
}

float float_setting(const json& raw, const std::string& k, const std::string& where) {
  const json& v = scalar(raw);
  if (!v.is_number())
    bad_setting(k, fmt::format("{} '{}' must be a number, not {}", where, k, raw.dump()));
  return v.get<float>();
}

bool bool_setting(const json& raw, const std::string& k, const std::string& where) {
  const json& v = scalar(raw);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v == 0 || v == 1)) return v == 1;  // an int tensor
  bad_setting(k, fmt::format("{} '{}' must be true or false, not {}", where, k, raw.dump()));
}

int32_t id_of(const json& v, const std::string& k, const std::string& where) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                              : v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX))
    bad_setting(k, fmt::format("{} '{}' holds {}, which is not a token id", where, k, v.dump()));
  return static_cast<int32_t>(v.get<int64_t>());
}

std::vector<int32_t> ids_setting(const json& v, const std::string& k, const std::string& where) {
  if (!v.is_array()) return {id_of(v, k, where)};
  std::vector<int32_t> out;
  for (const auto& x : v) out.push_back(id_of(x, k, where));
  return out;
}

}  // namespace

void GenerateSettings::merge(const GenerateSettings& o) {
  auto take = [](auto& mine, const auto& theirs) {
    if (theirs) mine = theirs;
  };
  take(max_length, o.max_length);
  take(max_new_tokens, o.max_new_tokens);
  take(min_length, o.min_length);
  take(min_new_tokens, o.min_new_tokens);
  take(do_sample, o.do_sample);
  take(early_stopping, o.early_stopping);
  take(temperature, o.temperature);
  take(top_p, o.top_p);
  take(min_p, o.min_p);
  take(typical_p, o.typical_p);
  take(repetition_penalty, o.repetition_penalty);
  take(length_penalty, o.length_penalty);
  take(top_k, o.top_k);
  take(num_beams, o.num_beams);
  take(num_return_sequences, o.num_return_sequences);
  take(no_repeat_ngram_size, o.no_repeat_ngram_size);
  take(pad_token_id, o.pad_token_id);
  take(eos_token_id, o.eos_token_id);
  take(bad_words_ids, o.bad_words_ids);
  take(seed, o.seed);
}

bool is_generate_setting(const std::string& name) {
  return kSettings.count(name) > 0;
}

bool is_generate_only_input(const std::string& name) {
  return name == "attention_mask" || (kSettings.count(name) > 0 && kShared.count(name) == 0);
}

GenerateSettings read_generate_settings(const json& obj, const std::string& where, bool strict,
                                        std::vector<std::string>* not_applied) {
  GenerateSettings s;
  if (!obj.is_object()) bad_setting("", fmt::format("{} must be a JSON object", where));
  for (const auto& [k, v] : obj.items()) {
    if (v.is_null()) continue;
    if (!kSettings.count(k)) {
      if (kNotApplied.count(k)) {
        if (strict)
          bad_setting(k, fmt::format("generate() setting '{}' is not supported by tokenflow", k));
        if (not_applied) not_applied->push_back(k);
      } else if (strict && !kHarmless.count(k)) {
        bad_setting(k, fmt::format("unknown input '{}'", k));
      }
      continue;
    }
    if (k == "max_length") s.max_length = int_setting(v, k, where);
    if (k == "max_new_tokens") s.max_new_tokens = int_setting(v, k, where);
    if (k == "min_length") s.min_length = int_setting(v, k, where);
    if (k == "min_new_tokens") s.min_new_tokens = int_setting(v, k, where);
    if (k == "top_k") s.top_k = int_setting(v, k, where);
    if (k == "num_beams") s.num_beams = int_setting(v, k, where);
    if (k == "num_return_sequences") s.num_return_sequences = int_setting(v, k, where);
    if (k == "no_repeat_ngram_size") s.no_repeat_ngram_size = int_setting(v, k, where);
    if (k == "do_sample") s.do_sample = bool_setting(v, k, where);
    if (k == "temperature") s.temperature = float_setting(v, k, where);
    if (k == "top_p") s.top_p = float_setting(v, k, where);
    if (k == "min_p") s.min_p = float_setting(v, k, where);
    if (k == "typical_p") s.typical_p = float_setting(v, k, where);
    if (k == "repetition_penalty") s.repetition_penalty = float_setting(v, k, where);
    if (k == "length_penalty") s.length_penalty = float_setting(v, k, where);
    if (k == "pad_token_id") s.pad_token_id = id_of(scalar(v), k, where);
    if (k == "eos_token_id") s.eos_token_id = ids_setting(v, k, where);
    if (k == "early_stopping") {
      const json& e = scalar(v);
      if (e.is_string())  // generate()'s "never": the canonical beam search, not ours
        bad_setting(k, fmt::format("{} 'early_stopping' {} is not supported (true or false)", where,
                                   e.dump()));
      s.early_stopping = bool_setting(v, k, where);
    }
    if (k == "bad_words_ids") {
      if (!v.is_array())
        bad_setting(k, fmt::format("{} 'bad_words_ids' must be a list of lists", where));
      std::vector<std::vector<int32_t>> words;
      for (const auto& w : v) {
        if (!w.is_array() || w.empty())
          bad_setting(k,
                      fmt::format("{} 'bad_words_ids' must be a list of non-empty lists", where));
        words.push_back(ids_setting(w, k, where));
      }
      s.bad_words_ids = std::move(words);
    }
    if (k == "seed") {
      // An integer, or TensorFlow generate()'s pair of integers.
      auto part = [&, &key = k](const json& x) -> uint64_t {
        if (!x.is_number_integer())
          bad_setting(key,
                      fmt::format("{} 'seed' must be an integer or a pair of integers", where));
        return x.is_number_unsigned() ? x.get<uint64_t>() : static_cast<uint64_t>(x.get<int64_t>());
      };
      if (v.is_array() && v.size() == 2) {
        s.seed = (part(v[0]) << 32) ^ part(v[1]);
      } else {
        s.seed = part(scalar(v));
      }
    }
  }
  return s;
}

GenerateSignature load_generate_signature(const std::string& model_path) {
  GenerateSignature sig;
  std::error_code ec;
  const fs::path base(model_path);
  const fs::path dir = fs::is_directory(base, ec) ? base : base.parent_path();
  const fs::path file = dir / "generation_config.json";
  if (!fs::exists(file, ec)) return sig;
  const json j = parse_json(read_file(file.string()), file.string());
  sig.settings = read_generate_settings(j, file.string(), false, &sig.not_applied);
  if (!sig.not_applied.empty()) {
    std::string names;
    for (const auto& n : sig.not_applied) names += (names.empty() ? "" : ", ") + n;
    log::warn("{}: not applied by the generate signature: {}", file.string(), names);
  }
  return sig;
}

namespace {

// The settings of a config's generate_signature, through their JSON (generate()'s names).
GenerateSettings config_settings(const tensorflow::serving::GenerateSignature& config,
                                 const std::string& model) {
  tensorflow::serving::GenerateSignature settings = config;
  settings.clear_signature_name();  // names, not settings (and proto2 strings may be any bytes)
  settings.clear_output_name();
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(settings, &text, options);
  const json j0 = json::parse(text, nullptr, false);
  if (j0.is_discarded())
    fail(ErrorKind::kInvalidArgument, "model '{}': generate_signature does not print as JSON",
         model);
  json j = j0;
  if (j.contains("seed") && j["seed"].is_string())  // int64 prints as a string
    j["seed"] = std::stoll(j["seed"].get<std::string>());
  try {
    return read_generate_settings(j, fmt::format("model '{}': generate_signature", model), true);
  } catch (const HttpError& e) {
    throw Error(ErrorKind::kInvalidArgument, e.what());
  }
}

}  // namespace

void apply_signature_config(GenerateSignature& sig,
                            const tensorflow::serving::GenerateSignature& config) {
  if (!config.signature_name().empty()) sig.name = config.signature_name();
  if (!config.output_name().empty()) sig.output = config.output_name();
  sig.settings.merge(config_settings(config, ""));
}

void validate_signature_config(const tensorflow::serving::GenerateSignature& config,
                               const std::string& model) {
  for (const std::string* n : {&config.signature_name(), &config.output_name()}) {
    const bool word = std::all_of(n->begin(), n->end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
             c == '/';
    });
    if (!word)
      fail(ErrorKind::kInvalidArgument,
           "model '{}': a generate_signature name may hold only letters, digits and _ - . /",
           model);
  }
  if (config.signature_name() == kTokenflowSignature)
    fail(ErrorKind::kInvalidArgument,
         "model '{}': generate_signature may not be named '{}' (tokenflow's own signature)", model,
         kTokenflowSignature);
  config_settings(config, model);
}

}  // namespace tf
