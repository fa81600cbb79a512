#include "serving/tfserving/generate_signature.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "serving/core/api_common.h"
#include "serving/core/request_fields.h"

namespace tf {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad_row_input(const std::string& field, const std::string& message) {
  throw HttpError(400, message, "", field);
}

}  // namespace

namespace {

int32_t row_id(const json& v, const char* field, size_t row) {
  try {
    return token_id(v, field);
  } catch (const Error& e) {
    bad_row_input(field, fmt::format("row {}: {}", row, e.what()));
  }
}

GenerateRow make_row(const json& ids, const json* mask, size_t r) {
  if (!ids.is_array() || ids.empty())
    bad_row_input("input_ids",
                  fmt::format("'input_ids' row {} must be a non-empty list of token ids", r));
  std::vector<int32_t> all;
  for (const auto& x : ids) all.push_back(row_id(x, "input_ids", r));
  size_t first = 0, end = all.size();
  if (mask) {
    if (!mask->is_array() || mask->size() != all.size())
      bad_row_input("attention_mask",
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
        bad_row_input("attention_mask",
                      fmt::format("'attention_mask' row {} holds {}: only 0 and 1", r, m.dump()));
      }
    }
    const auto a = std::find(real.begin(), real.end(), true);
    if (a == real.end())
      bad_row_input("attention_mask",
                    fmt::format("'attention_mask' row {} marks no real position", r));
    const auto b = std::find(real.rbegin(), real.rend(), true).base();
    if (std::find(a, b, false) != b)
      bad_row_input(
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
      bad_row_input("input_ids",
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
      bad_row_input("",
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
    bad_row_input("input_ids",
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
      bad_row_input("attention_mask",
                    fmt::format("'attention_mask' must have the shape of 'input_ids' ({} rows)",
                                rows.size()));
    mask_rows = matrix ? *mask : json::array({*mask});
  }
  for (size_t r = 0; r < rows.size(); ++r)
    in.rows.push_back(make_row(rows[r], mask ? &mask_rows[r] : nullptr, r));
  return in;
}

GenerateRowParams generate_row_params(const GenerateSettings& s, const GenerateRow& row, size_t r,
                                      const std::vector<int32_t>& stop_ids, int64_t context,
                                      int32_t decoder_start) {
  GenerateRowParams out;
  SamplingParams& p = out.params;
  const bool encoder_decoder = decoder_start >= 0;
  // The length max_length counts: the decoder's start token for an encoder-decoder.
  const int64_t len = encoder_decoder ? 1 : static_cast<int64_t>(row.lead.size() + row.ids.size());
  const bool sample = s.do_sample.value_or(false);
  const int32_t beams = s.num_beams.value_or(1);
  const int32_t returned = s.num_return_sequences.value_or(1);
  if (beams < 1) bad_row_input("num_beams", fmt::format("'num_beams' must be >= 1, not {}", beams));
  if (returned < 1)
    bad_row_input("num_return_sequences",
                  fmt::format("'num_return_sequences' must be >= 1, not {}", returned));
  if (!sample && beams == 1 && returned > 1)
    bad_row_input(
        "num_return_sequences",
        fmt::format("Greedy methods without beam search do not support `num_return_sequences` "
                    "different than 1 (got {}).",
                    returned));
  if (beams > 1 && returned > beams)
    bad_row_input(
        "num_return_sequences",
        fmt::format("`num_return_sequences` ({}) has to be smaller or equal to `num_beams` ({}).",
                    returned, beams));
  if (sample && beams > 1)
    bad_row_input("num_beams",
                  "'do_sample' with 'num_beams' > 1 (beam-search multinomial sampling) is not "
                  "supported");
  int64_t new_tokens = 0;
  const char* length_field = "max_new_tokens";
  if (s.max_new_tokens) {
    new_tokens = *s.max_new_tokens;
    if (new_tokens < 1)
      bad_row_input("max_new_tokens",
                    fmt::format("'max_new_tokens' must be >= 1, not {}", *s.max_new_tokens));
  } else {
    length_field = "max_length";
    const int32_t max_length = s.max_length.value_or(20);  // GenerationConfig's default
    new_tokens = max_length - len;
    if (new_tokens < 1)
      bad_row_input(
          "max_length",
          fmt::format("Input length of input_ids is {}, but `max_length` is set to {}. This can "
                      "lead to unexpected behavior. You should consider increasing `max_length` "
                      "or, better yet, setting `max_new_tokens`.",
                      len, max_length));
  }
  if (encoder_decoder &&
      (static_cast<int64_t>(row.ids.size()) > context || 1 + new_tokens > context))
    bad_row_input(
        length_field,
        fmt::format("row {}: {} encoder tokens, or 1 + {} decoder tokens ('{}'), exceed the "
                    "model's context of {} tokens",
                    r, row.ids.size(), new_tokens, length_field, context));
  if (!encoder_decoder && static_cast<int64_t>(row.ids.size()) + new_tokens > context)
    bad_row_input(
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
      bad_row_input(
          "temperature",
          fmt::format("`temperature` (={}) has to be a strictly positive float, otherwise your "
                      "next token scores will be invalid.",
                      t));
    p.temperature = t;
    p.top_k = s.top_k.value_or(50);  // GenerationConfig's default
    if (p.top_k < 0) bad_row_input("top_k", fmt::format("'top_k' must be >= 0, not {}", p.top_k));
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
    bad_row_input("repetition_penalty",
                  fmt::format("'repetition_penalty' must be > 0, not {}", p.repetition_penalty));
  p.no_repeat_ngram_size = s.no_repeat_ngram_size.value_or(0);
  if (p.no_repeat_ngram_size < 0)
    bad_row_input("no_repeat_ngram_size", fmt::format("'no_repeat_ngram_size' must be >= 0, not {}",
                                                      p.no_repeat_ngram_size));
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
    const std::vector<std::vector<std::vector<int32_t>>>& new_tokens, int32_t pad,
    int32_t decoder_start) {
  std::vector<std::vector<int32_t>> out;
  size_t width = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const auto& toks : new_tokens[r]) {
      std::vector<int32_t> line;
      if (decoder_start >= 0) {
        line.push_back(decoder_start);
      } else {
        line = rows[r].lead;
        line.insert(line.end(), rows[r].ids.begin(), rows[r].ids.end());
      }
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
