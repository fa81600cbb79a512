#include "serving/generate_signature.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <unordered_set>

#include "core/json.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "serving/api_common.h"
#include "serving/openai_request.h"

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

namespace {

int32_t row_id(const json& v, const char* field, size_t row) {
  try {
    return token_id(v, field);
  } catch (const Error& e) {
    bad_setting(field, fmt::format("row {}: {}", row, e.what()));
  }
}

GenerateRow make_row(const json& ids, const json* mask, size_t r) {
  if (!ids.is_array() || ids.empty())
    bad_setting("input_ids",
                fmt::format("'input_ids' row {} must be a non-empty list of token ids", r));
  std::vector<int32_t> all;
  for (const auto& x : ids) all.push_back(row_id(x, "input_ids", r));
  size_t first = 0, end = all.size();
  if (mask) {
    if (!mask->is_array() || mask->size() != all.size())
      bad_setting("attention_mask",
                  fmt::format("'attention_mask' row {} must have the {} positions of "
                              "'input_ids' row {}",
                              r, all.size(), r));
    std::vector<bool> real;
    for (const auto& m : *mask) {
      if (m.is_boolean()) {
        real.push_back(m.get<bool>());
      } else if (m.is_number_integer() && (m == 0 || m == 1)) {
        real.push_back(m == 1);
      } else {
        bad_setting("attention_mask",
                    fmt::format("'attention_mask' row {} holds {}: only 0 and 1", r, m.dump()));
      }
    }
    const auto a = std::find(real.begin(), real.end(), true);
    if (a == real.end())
      bad_setting("attention_mask",
                  fmt::format("'attention_mask' row {} marks no real position", r));
    const auto b = std::find(real.rbegin(), real.rend(), true).base();
    if (std::find(a, b, false) != b)
      bad_setting(
          "attention_mask",
          fmt::format("'attention_mask' row {} has padding between real positions: it must pad "
                      "on the left or on the right",
                      r));
    first = static_cast<size_t>(a - real.begin());
    end = static_cast<size_t>(b - real.begin());
  }
  GenerateRow row;
  row.lead.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(first));
  row.ids.assign(all.begin() + static_cast<std::ptrdiff_t>(first),
                 all.begin() + static_cast<std::ptrdiff_t>(end));
  return row;
}

}  // namespace

GenerateInput read_generate_rows(const json& instances) {
  GenerateInput in;
  for (size_t i = 0; i < instances.size(); ++i) {
    const json& inst = instances[i];
    if (!inst.is_object() || !inst.contains("input_ids"))
      bad_setting("input_ids",
                  fmt::format("instance {} of the generate signature must be an object with "
                              "'input_ids' (and 'attention_mask')",
                              i));
    json settings = json::object();
    for (const auto& [k, v] : inst.items())
      if (k != "input_ids" && k != "attention_mask") settings[k] = v;
    GenerateSettings s = read_generate_settings(settings, "input", true);
    if (i == 0) {
      in.settings = std::move(s);
    } else if (!(s == in.settings)) {
      bad_setting("",
                  "instances set generate() settings differently: one request is one generate() "
                  "call, with one set of settings");
    }
    in.rows.push_back(make_row(
        inst["input_ids"], inst.contains("attention_mask") ? &inst["attention_mask"] : nullptr, i));
  }
  return in;
}

GenerateInput read_generate_columns(const json& inputs) {
  if (!inputs.is_object() || !inputs.contains("input_ids"))
    bad_setting("input_ids",
                "'inputs' of the generate signature must be an object with 'input_ids' (and "
                "'attention_mask')");
  GenerateInput in;
  json settings = json::object();
  for (const auto& [k, v] : inputs.items())
    if (k != "input_ids" && k != "attention_mask") settings[k] = v;
  in.settings = read_generate_settings(settings, "input", true);
  const json& ids = inputs["input_ids"];
  const bool matrix = ids.is_array() && !ids.empty() && ids[0].is_array();
  const json rows = matrix ? ids : json::array({ids});
  const json* mask = inputs.contains("attention_mask") ? &inputs["attention_mask"] : nullptr;
  json mask_rows;
  if (mask) {
    const bool mask_matrix = mask->is_array() && !mask->empty() && (*mask)[0].is_array();
    if (mask_matrix != matrix || (matrix && mask->size() != rows.size()))
      bad_setting("attention_mask",
                  fmt::format("'attention_mask' must have the shape of 'input_ids' ({} rows)",
                              rows.size()));
    mask_rows = matrix ? *mask : json::array({*mask});
  }
  for (size_t r = 0; r < rows.size(); ++r)
    in.rows.push_back(make_row(rows[r], mask ? &mask_rows[r] : nullptr, r));
  return in;
}

GenerateRowParams generate_row_params(const GenerateSettings& s, const GenerateRow& row, size_t r,
                                      const std::vector<int32_t>& stop_ids, int64_t context) {
  GenerateRowParams out;
  SamplingParams& p = out.params;
  const int64_t len = static_cast<int64_t>(row.lead.size() + row.ids.size());
  const bool sample = s.do_sample.value_or(false);
  const int32_t beams = s.num_beams.value_or(1);
  const int32_t returned = s.num_return_sequences.value_or(1);
  if (beams < 1) bad_setting("num_beams", fmt::format("'num_beams' must be >= 1, not {}", beams));
  if (returned < 1)
    bad_setting("num_return_sequences",
                fmt::format("'num_return_sequences' must be >= 1, not {}", returned));
  if (!sample && beams == 1 && returned > 1)
    bad_setting(
        "num_return_sequences",
        fmt::format("Greedy methods without beam search do not support `num_return_sequences` "
                    "different than 1 (got {}).",
                    returned));
  if (beams > 1 && returned > beams)
    bad_setting(
        "num_return_sequences",
        fmt::format("`num_return_sequences` ({}) has to be smaller or equal to `num_beams` ({}).",
                    returned, beams));
  if (sample && beams > 1)
    bad_setting("num_beams",
                "'do_sample' with 'num_beams' > 1 (beam-search multinomial sampling) is not "
                "supported");
  int64_t new_tokens = 0;
  const char* length_field = "max_new_tokens";
  if (s.max_new_tokens) {
    new_tokens = *s.max_new_tokens;
    if (new_tokens < 1)
      bad_setting("max_new_tokens",
                  fmt::format("'max_new_tokens' must be >= 1, not {}", *s.max_new_tokens));
  } else {
    length_field = "max_length";
    const int32_t max_length = s.max_length.value_or(20);  // GenerationConfig's default
    new_tokens = max_length - len;
    if (new_tokens < 1)
      bad_setting(
          "max_length",
          fmt::format("Input length of input_ids is {}, but `max_length` is set to {}. This can "
                      "lead to unexpected behavior. You should consider increasing `max_length` "
                      "or, better yet, setting `max_new_tokens`.",
                      len, max_length));
  }
  if (static_cast<int64_t>(row.ids.size()) + new_tokens > context)
    bad_setting(
        length_field,
        fmt::format("row {}: {} prompt tokens and {} new ones ('{}') exceed the model's context of "
                    "{} tokens",
                    r, row.ids.size(), new_tokens, length_field, context));
  p.max_tokens = static_cast<int32_t>(new_tokens);
  int64_t min_new = 0;
  if (s.min_new_tokens) {
    min_new = *s.min_new_tokens;
  } else if (s.min_length) {
    min_new = *s.min_length - len;
  }
  p.min_tokens = static_cast<int32_t>(std::clamp<int64_t>(min_new, 0, p.max_tokens));
  if (sample) {
    const float t = s.temperature.value_or(1.0f);
    if (!(t > 0.0f))
      bad_setting(
          "temperature",
          fmt::format("`temperature` (={}) has to be a strictly positive float, otherwise your "
                      "next token scores will be invalid.",
                      t));
    p.temperature = t;
    p.top_k = s.top_k.value_or(50);  // GenerationConfig's default
    if (p.top_k < 0) bad_setting("top_k", fmt::format("'top_k' must be >= 0, not {}", p.top_k));
    p.top_p = s.top_p.value_or(1.0f);
    p.min_p = s.min_p.value_or(0.0f);
    p.typical_p = s.typical_p.value_or(1.0f);
    p.n = returned;
  } else {
    p.temperature = 0.0f;  // greedy (beam search scores without temperature)
  }
  if (beams > 1) {
    p.num_beams = beams;
    p.num_return_sequences = returned;
    p.length_penalty = s.length_penalty.value_or(1.0f);
    p.early_stopping = s.early_stopping.value_or(false);
  }
  p.repetition_penalty = s.repetition_penalty.value_or(1.0f);
  if (!(p.repetition_penalty > 0.0f))
    bad_setting("repetition_penalty",
                fmt::format("'repetition_penalty' must be > 0, not {}", p.repetition_penalty));
  p.no_repeat_ngram_size = s.no_repeat_ngram_size.value_or(0);
  if (p.no_repeat_ngram_size < 0)
    bad_setting("no_repeat_ngram_size",
                fmt::format("'no_repeat_ngram_size' must be >= 0, not {}", p.no_repeat_ngram_size));
  if (s.bad_words_ids) p.bad_words_ids = *s.bad_words_ids;
  p.seed = s.seed;
  if (s.eos_token_id && *s.eos_token_id != stop_ids) {
    // Its own end-of-sequence ids instead of the model's.
    p.ignore_eos = true;
    p.stop_token_ids = *s.eos_token_id;
  }
  out.sequences = returned;
  return out;
}

int32_t generate_pad_id(const GenerateSettings& s, const std::vector<int32_t>& stop_ids) {
  if (s.pad_token_id) return *s.pad_token_id;
  if (s.eos_token_id && !s.eos_token_id->empty()) return (*s.eos_token_id)[0];
  return stop_ids.empty() ? 0 : stop_ids[0];
}

std::vector<std::vector<int32_t>> generate_output(
    const std::vector<GenerateRow>& rows,
    const std::vector<std::vector<std::vector<int32_t>>>& new_tokens, int32_t pad) {
  std::vector<std::vector<int32_t>> out;
  size_t width = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const auto& toks : new_tokens[r]) {
      std::vector<int32_t> line = rows[r].lead;
      line.insert(line.end(), rows[r].ids.begin(), rows[r].ids.end());
      line.insert(line.end(), toks.begin(), toks.end());
      width = std::max(width, line.size());
      out.push_back(std::move(line));
    }
  }
  for (auto& line : out) line.resize(width, pad);
  return out;
}

json tensor_info_json(const std::string& name, const char* dtype, int rank) {
  json dims = json::array();
  for (int i = 0; i < rank; ++i) dims.push_back({{"size", "-1"}, {"name", ""}});
  return {
      {"dtype", dtype}, {"tensor_shape", {{"dim", dims}, {"unknown_rank", false}}}, {"name", name}};
}

json generate_signature_def(const GenerateSignature& sig) {
  // The tensor names a tf.saved_model.save export gives them.
  json inputs = {
      {"input_ids", tensor_info_json(sig.name + "_input_ids:0", "DT_INT32", 2)},
      {"attention_mask", tensor_info_json(sig.name + "_attention_mask:0", "DT_INT32", 2)}};
  json outputs = {{sig.output, tensor_info_json("StatefulPartitionedCall:0", "DT_INT32", 2)}};
  return {{"inputs", inputs}, {"outputs", outputs}, {"method_name", "tensorflow/serving/predict"}};
}

}  // namespace tf
