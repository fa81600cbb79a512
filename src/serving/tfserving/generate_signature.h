#pragma once
// TF Serving's generate signature, request side: what a Hugging Face TF causal LM exported with
//   serving_fn(input_ids, attention_mask) = model.generate(input_ids=..., attention_mask=...)
// as its `serving_default` answers. Inputs `input_ids` and `attention_mask` ([batch, len], left
// or right padded: the mask marks the real positions), generate()'s settings under generate()'s
// names as extra inputs; the answer is the ids of prompt plus continuation, [batch *
// num_return_sequences, max_len], padded with the pad id, under one output (`output_0`). The
// settings and the model's signature are models/generate_settings.h's. Reading a request needs no
// model; what depends on one (the vocabulary, the context, the stop and pad ids) is
// generate_row_params'.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampling_params.h"
#include "serving/models/generate_settings.h"

namespace tf {

// One row of a generate request.
struct GenerateRow {
  std::vector<int32_t> lead;  // positions before the first real one, as sent (left padding)
  std::vector<int32_t> ids;   // the real positions (attention_mask 1)
};
struct GenerateInput {
  std::vector<GenerateRow> rows;
  GenerateSettings settings;  // the request's extra inputs (the same for every row)
};

// A generate request's body: the row format (instances, each {"input_ids": [...],
// "attention_mask": [...], settings...}) or the columnar one (inputs {"input_ids": [[...]],
// "attention_mask": [[...]], settings...}). HttpError 400 naming the input on a problem.
GenerateInput read_generate_rows(const nlohmann::json& instances);
GenerateInput read_generate_columns(const nlohmann::json& inputs);

// What one row asks of the engine.
struct GenerateRowParams {
  SamplingParams params;
  int32_t sequences = 1;  // rows of the answer this row gets (num_return_sequences)
};
// The engine parameters of a row (settings: the signature's merged with the request's), with
// generate()'s rules and messages; stop_ids: the model's end-of-sequence ids, context its
// length. Throws HttpError 400.
// decoder_start >= 0: an encoder-decoder (TFT5ForConditionalGeneration.generate): the row is the
// encoder's input, and max_length counts the decoder's tokens, its start token included.
GenerateRowParams generate_row_params(const GenerateSettings& settings, const GenerateRow& row,
                                      size_t row_index, const std::vector<int32_t>& stop_ids,
                                      int64_t context, int32_t decoder_start = -1);
// The pad id of the answer: pad_token_id, else the first eos_token_id, else the model's first
// stop id, else 0 (generate()'s fallback to eos).
int32_t generate_pad_id(const GenerateSettings& settings, const std::vector<int32_t>& stop_ids);

// The answer: per input row, its sequences' new tokens (sequences() of them) after the row's lead
// and ids (an encoder-decoder's, decoder_start >= 0: after the decoder's start token, as its
// generate() returns the decoder's sequences), padded with pad to the longest.
std::vector<std::vector<int32_t>> generate_output(
    const std::vector<GenerateRow>& rows,
    const std::vector<std::vector<std::vector<int32_t>>>& new_tokens, int32_t pad,
    int32_t decoder_start = -1);

// A TensorInfo as JSON: dtype, rank unknown dimensions, tensor name.
nlohmann::json tensor_info_json(const std::string& name, const char* dtype, int rank);
// The signature's entry of a SignatureDefMap, as JSON (TF Serving's REST metadata).
nlohmann::json generate_signature_def(const GenerateSignature& sig);

}  // namespace tf
