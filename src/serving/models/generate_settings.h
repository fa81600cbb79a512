#pragma once
// A model's generate settings: the settings and names of TF Serving's generate signature (the
// rows, their engine parameters and the padded answer are tfserving/generate_signature.h's). The
// signature is what a Hugging Face TF causal LM exported with
//   serving_fn(input_ids, attention_mask) = model.generate(input_ids=..., attention_mask=...)
// as its `serving_default` answers. Inputs `input_ids` and `attention_mask` ([batch, len], left
// or right padded: the mask marks the real positions), generate()'s settings under generate()'s
// names as extra inputs; the answer is the ids of prompt plus continuation, [batch *
// num_return_sequences, max_len], padded with the pad id, under one output (`output_0`, what
// tf.saved_model.save names a signature's single output).
//
// Settings come, field by field, from Hugging Face's defaults, then the model's
// generation_config.json, then the model config's `generate_signature` (a tokenflow extension of
// TF Serving's ModelConfig), then the request. Each row runs as a sequence of its own in the
// engine: a row's continuation is what generate() gives that row (its padding changes nothing:
// generate() masks it and numbers positions from the first real one).
//

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sampling/sampling_params.h"
#include "tensorflow_serving/config/model_server_config.pb.h"

namespace tf {

// generate()'s settings, each unset unless given.
struct GenerateSettings {
  std::optional<int32_t> max_length, max_new_tokens, min_length, min_new_tokens;
  std::optional<bool> do_sample, early_stopping;
  std::optional<float> temperature, top_p, min_p, typical_p, repetition_penalty, length_penalty;
  std::optional<int32_t> top_k, num_beams, num_return_sequences, no_repeat_ngram_size;
  std::optional<int32_t> pad_token_id;
  std::optional<std::vector<int32_t>> eos_token_id;  // one id or several; [] stops on none
  std::optional<std::vector<std::vector<int32_t>>> bad_words_ids;
  std::optional<uint64_t> seed;

  // over's set fields replace these.
  void merge(const GenerateSettings& over);
  bool operator==(const GenerateSettings&) const = default;
};

// The names read_generate_settings takes (generate()'s).
bool is_generate_setting(const std::string& name);
// Names only the generate signature has (a request holding one is a generate request):
// attention_mask and the settings tokenflow's own signature does not share.
bool is_generate_only_input(const std::string& name);

// Settings from a JSON object with generate()'s names. where names the source in errors ("input",
// "generation_config.json"). strict: any other key is an error ("unknown input 'x'"); otherwise
// other keys are skipped and, when they would change decoding, listed in not_applied. A scalar
// setting may be a one-element list (a [1] tensor). Throws HttpError 400 naming the field.
GenerateSettings read_generate_settings(const nlohmann::json& obj, const std::string& where,
                                        bool strict,
                                        std::vector<std::string>* not_applied = nullptr);

// A model's generate signature: its names and its settings over Hugging Face's defaults.
struct GenerateSignature {
  std::string name = "serving_default";
  std::string output = "output_0";
  GenerateSettings settings;  // generation_config.json, then the model config's
  // generation_config.json keys that change decoding but are not applied (logged at load).
  std::vector<std::string> not_applied;
};

// The generation_config.json of a model directory (beside a model file), if there is one. A
// malformed file is an Error naming it.
GenerateSignature load_generate_signature(const std::string& model_path);
// A model config's generate_signature over sig (names and settings).
void apply_signature_config(GenerateSignature& sig,
                            const tensorflow::serving::GenerateSignature& config);
// Checks a model config's generate_signature (the config validator's part): the names are
// usable, the settings read as requests' would. Throws Error naming the model.
void validate_signature_config(const tensorflow::serving::GenerateSignature& config,
                               const std::string& model);

// The name tokenflow's own Predict signature (prompt / input_ids and OpenAI's parameters in,
// text / output_ids / finish_reason out) has beside the generate signature.
inline constexpr const char* kTokenflowSignature = "tokenflow";

}  // namespace tf
